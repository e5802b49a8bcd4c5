// cudnn_version — prints the version of the cuDNN library it runs against.
// cudnnGetVersion() needs no GPU: it only reports the library's version
// (e.g. 92700 for 9.27.0).
#include <cstdio>

#include <cudnn.h>

int main() {
    std::printf("cudnn version %zu\n", static_cast<std::size_t>(cudnnGetVersion()));
    return 0;
}
