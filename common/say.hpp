// say(): a line meshrun tells the person running the job, on stderr, as "meshrun: TEXT". Its log (spdlog) is
// for what happened in detail; these are the lines a user reads to know what the launcher is doing and why.
#pragma once

#include <cstdio>
#include <string>

namespace meshrun {

inline void say(const std::string& text) { std::fprintf(stderr, "meshrun: %s\n", text.c_str()); }

}  // namespace meshrun
