// Catch2 runner. curl_global_init() is called once here, as in the tools,
// because the library never initializes libcurl on the fly.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <curl/curl.h>

int main(int argc, char* argv[]) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const int failures = Catch::Session().run(argc, argv);
    curl_global_cleanup();
    return failures;
}
