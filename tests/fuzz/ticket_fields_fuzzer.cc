// libFuzzer target for a ticket's fields as the receiving side reads them
// before it claims (client/src/ticket_fields.cc): bytes from another process
// must never crash it, and what it reads must be what a parse of the whole
// ticket reads: the same directory, and never a ticket a parse finds
// without its secret.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "client/src/ticket_fields.h"
#include "google/protobuf/stubs/logging.h"
#include "gpubroker/v1/session.pb.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Malformed strings are the point here; protobuf's complaints are noise.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const auto dir = gpubroker::detail::TicketSocketDirOf(bytes);
  gpubroker::v1::Ticket parsed;
  const bool parses = parsed.ParseFromArray(data, static_cast<int>(size));
  // A parse also checks the buffer's description inside, which the reader
  // skips: where the parse fails the reader may still answer, and the claim
  // (a parse) refuses the ticket then.
  if (dir && parses && (*dir != parsed.socket_dir() || parsed.secret().empty())) std::abort();
  return 0;
}
