// check_prefix — is a prefix still what redist installed, and will it work?
// verify_prefix() hashes every installed file against the receipts;
// run_checks() then inspects the libraries (ELF dependencies, versions, the
// driver), as `redist verify` and `redist check --quick` do.
//
//   check_prefix PREFIX
//
// Exit status: 0 when both pass, 5 (integrity) when a file changed, 11 when
// a check failed, 2 for usage, otherwise redist::exit_code_for() of the error.
#include <cstdio>

#include <redist/check.hpp>
#include <redist/prefix.hpp>
#include <redist/printable.hpp>

namespace {

int fail(const redist::error& e) {
    std::fprintf(stderr, "check_prefix: %s\n", e.describe().c_str());
    return redist::exit_code_for(e.code);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: check_prefix PREFIX\n");
        return 2;
    }

    // 1. Every file against its receipt (size, type, SHA-256), under the
    //    prefix lock held shared: never half a commit.
    auto verified = redist::verify_prefix(argv[1]);
    if (!verified.ok()) return fail(verified.error_value());
    std::printf("verify: %zu components, %zu files, %zu problems\n", verified->components, verified->files,
                verified->problems.size());
    // Names come from the prefix: printable() makes them inert before they are printed.
    for (const auto& p : verified->problems)
        std::printf("  %s: %s %s\n", redist::printable(p.component).c_str(), redist::printable(p.path).c_str(),
                    p.what.c_str());
    if (!verified->problems.empty()) return redist::exit_code_for(redist::error_code::integrity);

    // 2. The checks, quick: files are read, installed code never runs.
    auto report = redist::run_checks({.prefix = argv[1], .depth = redist::check_depth::quick});
    if (!report.ok()) return fail(report.error_value());
    for (const auto& f : report->findings)
        if (f.severity != redist::check_severity::info)
            std::printf("  %s %s: %s\n", redist::to_string(f.severity), f.check.c_str(),
                        redist::printable(f.message).c_str());
    std::printf("check: %zu libraries, %zu failures, %zu warnings\n", report->libraries,
                report->count(redist::check_severity::failure), report->count(redist::check_severity::warning));
    return report->failed() ? redist::exit_code_for(redist::error_code::check_failed) : 0;
}
