/* Prints the version the cuDNN library it is linked against reports. */
#include <stdio.h>

#include <cudnn.h>

int main(void) {
    printf("cudnn version %zu\n", cudnnGetVersion());
    return 0;
}
