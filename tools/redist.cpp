// placeholder; the real tool is being written
int main() { return 0; }
