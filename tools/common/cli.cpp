// placeholder; shared tool code is being written
namespace redist_tools { int placeholder = 0; }
