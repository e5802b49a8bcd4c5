// The exit-code table (include/redist/error.hpp): one row per error code,
// distinct codes, and README.md / docs/ saying the same thing.
#include <catch2/catch.hpp>

#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <string>

#include "redist/error.hpp"
#include "support.hpp"

using namespace redist;

namespace {

std::map<int, std::string> readme_exit_codes() {
    const std::string readme = redist_test::slurp(std::filesystem::path(REDIST_SOURCE_DIR) / "README.md");
    const auto start = readme.find("### Exit codes");
    REQUIRE(start != std::string::npos);
    std::map<int, std::string> rows;
    const std::regex row(R"(^\| (\d+) \| (.*) \|$)");
    std::size_t pos = start;
    bool in_table = false;
    while (pos < readme.size()) {
        const auto eol = readme.find('\n', pos);
        const std::string line = readme.substr(pos, eol == std::string::npos ? std::string::npos : eol - pos);
        pos = eol == std::string::npos ? readme.size() : eol + 1;
        if (line.rfind('|', 0) == 0) in_table = true;
        else if (in_table) break;  // the first line after the table
        std::smatch m;
        if (std::regex_match(line, m, row)) rows.emplace(std::stoi(m[1]), m[2]);
    }
    return rows;
}

}  // namespace

TEST_CASE("exit-code table: every error code once, in enumerator order, with distinct exit codes") {
    const auto table = exit_code_table();
    REQUIRE(!table.empty());
    std::set<int> codes;
    std::set<std::string> names;
    for (std::size_t i = 0; i < table.size(); ++i) {
        CHECK(static_cast<std::size_t>(table[i].code) == i);
        CHECK(codes.insert(table[i].exit_code).second);
        CHECK(names.insert(table[i].name).second);
        CHECK(table[i].exit_code > 0);
        CHECK(std::string(table[i].summary).size() > 0);
        CHECK(exit_code_for(table[i].code) == table[i].exit_code);
        CHECK(std::string(to_string(table[i].code)) == table[i].name);
    }
}

TEST_CASE("exit codes the documentation promises") {
    CHECK(exit_code_for(error_code::usage) == 2);
    CHECK(exit_code_for(error_code::integrity) == 5);
    CHECK(exit_code_for(error_code::check_failed) == 11);
    CHECK(exit_code_for(error_code::cancelled) == 130);
    CHECK(std::string(to_string(error_code::cancelled)) == "cancelled");
}

TEST_CASE("README.md's exit-code table matches exit_code_table()") {
    const auto readme = readme_exit_codes();
    REQUIRE(readme.count(0));
    CHECK(readme.at(0).rfind("success", 0) == 0);
    std::set<int> expected{0};
    for (const auto& row : exit_code_table()) {
        expected.insert(row.exit_code);
        INFO("exit code " << row.exit_code << " (" << row.name << ")");
        REQUIRE(readme.count(row.exit_code));
        // Each README row starts with the words --help prints for it.
        CHECK(readme.at(row.exit_code).rfind(row.summary, 0) == 0);
    }
    std::set<int> documented;
    for (const auto& [code, text] : readme) documented.insert(code);
    CHECK(documented == expected);
}

TEST_CASE("README.md and docs/ name only exit codes that exist") {
    std::set<int> known{0};
    for (const auto& row : exit_code_table()) known.insert(row.exit_code);
    std::vector<std::filesystem::path> files{std::filesystem::path(REDIST_SOURCE_DIR) / "README.md"};
    for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::path(REDIST_SOURCE_DIR) / "docs"))
        if (entry.path().extension() == ".md") files.push_back(entry.path());
    // "exit 5", "exits 11", "exit code 3", "(exit 130)"
    const std::regex mention(R"(\b[Ee]xit(?:s| code| status)? (\d+)\b)");
    std::size_t seen = 0;
    for (const auto& file : files) {
        const std::string text = redist_test::slurp(file);
        for (std::sregex_iterator it(text.begin(), text.end(), mention), end; it != end; ++it) {
            ++seen;
            INFO(file.filename().string() << ": " << (*it)[0]);
            CHECK(known.count(std::stoi((*it)[1])));
        }
    }
    CHECK(seen > 0);  // the pattern still finds the mentions
}
