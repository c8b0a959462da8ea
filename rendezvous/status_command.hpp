// `meshrun-rendezvous status`: asks a running daemon for its runs and prints a table or JSON.
#pragma once

#include <ostream>

#include "proto/rendezvous/rendezvous_messages.hpp"

namespace meshrun::rendezvous {

/// Renders the status reply as the human table users see by default.
void print_status_table(const proto::StatusReply& status, std::ostream& out);

}  // namespace meshrun::rendezvous
