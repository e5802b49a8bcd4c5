// redist::printable (include/redist/printable.hpp): the one escaper for
// untrusted text shown to a person.
#include <catch2/catch.hpp>

#include <string>

#include "redist/printable.hpp"

using redist::backslashes;
using redist::no_length_limit;
using redist::printable;

namespace {
std::string whole(std::string_view text, backslashes b = backslashes::escape) {
    return printable(text, no_length_limit, b);
}
}  // namespace

TEST_CASE("printable keeps plain text and printable UTF-8") {
    CHECK(whole("lib/libcudnn.so.9") == "lib/libcudnn.so.9");
    CHECK(whole("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80") == "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    CHECK(whole("") == "");
}

TEST_CASE("printable escapes C0 controls and DEL as backslash-x and two hex digits") {
    CHECK(whole("a\x1b[31mb") == "a\\x1b[31mb");
    CHECK(whole("line\nbreak\r\t\x7f") == "line\\x0abreak\\x0d\\x09\\x7f");
    CHECK(whole(std::string("nul\0x", 5)) == "nul\\x00x");
}

TEST_CASE("printable escapes C1 controls and bidirectional overrides as backslash-u and the code point in braces") {
    CHECK(whole("\xc2\x9b"
                "31m") == "\\u{009B}31m");  // CSI, a one-character ESC [
    CHECK(whole("\xc2\x85") == "\\u{0085}");
    CHECK(whole("abc\xe2\x80\xae"
                "cba") == "abc\\u{202E}cba");  // RIGHT-TO-LEFT OVERRIDE
    CHECK(whole("\xe2\x80\x8f\xe2\x81\xa6") == "\\u{200F}\\u{2066}");
    CHECK(whole("\xc2\xa0") == "\xc2\xa0");  // U+00A0 is printable: kept
}

TEST_CASE("printable escapes bytes that are not valid UTF-8") {
    CHECK(whole("\xff\xfe") == "\\xff\\xfe");
    CHECK(whole("bad\xc3(") == "bad\\xc3(");                     // truncated sequence
    CHECK(whole("\xc0\xaf") == "\\xc0\\xaf");                    // overlong '/'
    CHECK(whole("\xed\xa0\x80") == "\\xed\\xa0\\x80");           // a surrogate
    CHECK(whole("\xf4\x90\x80\x80") == "\\xf4\\x90\\x80\\x80");  // past U+10FFFF
    CHECK(whole("end\xe2\x82") == "end\\xe2\\x82");              // cut at the end
}

TEST_CASE("printable escapes backslashes unless told to keep them") {
    CHECK(whole("back\\slash") == "back\\\\slash");
    CHECK(whole("\\x1b") == "\\\\x1b");  // a name that spells an escape stays distinguishable
    // Text escaped before (error::describe()) is not escaped twice...
    CHECK(whole("name '\\x1b[2J' is bad", backslashes::keep) == "name '\\x1b[2J' is bad");
    // ...and the controls in it are escaped all the same.
    CHECK(whole("a\\b\x1b", backslashes::keep) == "a\\b\\x1b");
}

TEST_CASE("printable output is inert: no control byte survives, and keep-mode is idempotent") {
    std::string all;
    for (int c = 0; c < 256; ++c) all += static_cast<char>(c);
    all += "\xc2\x80\xc2\x9f\xe2\x80\xaa\xe2\x81\xa9";
    for (auto mode : {backslashes::escape, backslashes::keep}) {
        const std::string out = whole(all, mode);
        for (const char ch : out) {
            const auto c = static_cast<unsigned char>(ch);
            CHECK((c >= 0x20 && c < 0x7f));  // only ASCII here: every high byte was invalid or a control
        }
        CHECK(whole(out, backslashes::keep) == out);
    }
}

TEST_CASE("printable cuts long text and says so") {
    CHECK(printable(std::string(500, 'x'), 10) == std::string(10, 'x') + "...");
    CHECK(printable(std::string(10, 'x'), 10) == std::string(10, 'x'));
    CHECK(printable(std::string(300, 'x')).size() == 203);  // the default suits a name in a message
    CHECK(whole(std::string(5000, 'x')).size() == 5000);
}
