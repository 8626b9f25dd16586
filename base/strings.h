// Text helpers: what goes into log lines and error messages (conventions C20: never
// credentials, never raw untrusted bytes), and the two parsing steps every reader of outside
// text needs (HTTP headers, INI files, /proc files, index records): trimming and decimal numbers;
// and the joining and splitting of the '/'-separated paths of a source's keys.
//
//   Logger(Module::kBlobClient).warn("GET {} failed: {}", EscapeForLog(key), EscapeForLog(body));
//
// Object keys, listing names and server error bodies come from outside: a key holding "\n" or
// an ANSI escape would forge or garble log lines. EscapeForLog makes them printable; RedactUrl
// drops the userinfo ("user:pass@") of a URL.
//
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace tierfs {

// `s` with every control byte (0x00-0x1f, 0x7f) and '\' written as a C escape ("\n", "\t",
// "\\", otherwise "\xHH"); other bytes (UTF-8 included) unchanged. Longer than `max_bytes`
// input is cut there and "...(N bytes)" appended, so a huge server body cannot flood the log.
std::string EscapeForLog(std::string_view s, size_t max_bytes = 1024);

// `url` without the userinfo of its authority: "http://user:pass@host:9000/x" →
// "http://***@host:9000/x". Anything else is returned as it is.
std::string RedactUrl(std::string_view url);

// `s` without the ASCII whitespace (space, \t, \n, \v, \f, \r) at either end; a view into `s`.
std::string_view TrimSpace(std::string_view s);

// The number `s` spells in decimal: digits only (no sign, space or base prefix), the whole of
// `s`, at most 2^64 - 1. False (and *out unchanged) for anything else, the empty string included.
bool ParseDecimal(std::string_view s, uint64_t* out);

// Paths of a source's keys: relative, '/'-separated, "" for the root. "a/b" + "c" → "a/b/c";
// "" + "c" → "c".
std::string JoinPath(std::string_view dir, std::string_view name);
// "a/b/c" → ("a/b", "c"); "c" → ("", "c"): the directory and the last name.
std::pair<std::string_view, std::string_view> SplitPath(std::string_view path);

// Absolute local paths: the parent directory. "/a/b" → "/a"; "/a" → "/"; "/" → "/" (and, for a
// path without '/', "/").
std::string_view ParentDir(std::string_view path);

}  // namespace tierfs
