#pragma once

// What the receiving side reads from a ticket before it claims it: the
// socket directory of the daemon that made it (to pick this process's client
// of that daemon). Read field by field, the buffer's description skipped
// rather than parsed: the claim that follows parses the whole ticket.

#include <optional>
#include <string>
#include <string_view>

namespace gpubroker::detail {

/// The ticket's socket directory ("" where it names none), or nullopt for
/// bytes that are not a ticket: what a parse of v1::Ticket refuses at its
/// top level, a ticket without its secret, and a top-level group (tickets
/// have none). A directory that is not ASCII has its UTF-8 checked by a parse.
std::optional<std::string> TicketSocketDirOf(std::string_view ticket);

}  // namespace gpubroker::detail
