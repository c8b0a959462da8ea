// The live page: one HTML document with its CSS and JavaScript inline (no CDN: it works offline). Its
// source is rendezvous/http/page.html; CMake embeds it into the binary (page.cpp.in).
#pragma once

#include <string_view>

namespace meshrun::rendezvous::http {

/// page.html, as compiled in.
std::string_view page_html();

}  // namespace meshrun::rendezvous::http
