// Text helpers for what goes into log lines and error messages (conventions C20: never
// credentials, never raw untrusted bytes).
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
#include <string>
#include <string_view>

namespace tierfs {

// `s` with every control byte (0x00-0x1f, 0x7f) and '\' written as a C escape ("\n", "\t",
// "\\", otherwise "\xHH"); other bytes (UTF-8 included) unchanged. Longer than `max_bytes`
// input is cut there and "...(N bytes)" appended, so a huge server body cannot flood the log.
std::string EscapeForLog(std::string_view s, size_t max_bytes = 1024);

// `url` without the userinfo of its authority: "http://user:pass@host:9000/x" →
// "http://***@host:9000/x". Anything else is returned as it is.
std::string RedactUrl(std::string_view url);

}  // namespace tierfs
