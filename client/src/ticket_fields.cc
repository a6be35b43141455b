#include "client/src/ticket_fields.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "google/protobuf/io/coded_stream.h"
#include "gpubroker/v1/session.pb.h"

namespace gpubroker::detail {

std::optional<std::string> TicketSocketDirOf(std::string_view ticket) {
  if (ticket.size() > static_cast<size_t>(std::numeric_limits<int>::max())) return std::nullopt;
  const int size = static_cast<int>(ticket.size());
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(ticket.data()), size);
  bool has_secret = false;
  std::string dir;
  for (uint32_t tag = in.ReadTag(); tag != 0; tag = in.ReadTag()) {
    const uint32_t field = tag >> 3;
    if (field == 0) return std::nullopt;
    uint32_t length = 0;
    uint64_t varint = 0;
    switch (tag & 7) {
      case 0:  // varint
        if (!in.ReadVarint64(&varint)) return std::nullopt;
        break;
      case 1:  // 64 bits
        if (!in.Skip(8)) return std::nullopt;
        break;
      case 2:  // length-delimited
        if (!in.ReadVarint32(&length) || length > ticket.size()) return std::nullopt;
        if (field == v1::Ticket::kSocketDirFieldNumber) {
          if (!in.ReadString(&dir, static_cast<int>(length))) return std::nullopt;
        } else {
          if (!in.Skip(static_cast<int>(length))) return std::nullopt;
          // Of a repeated field the last counts, as in a parse.
          if (field == v1::Ticket::kSecretFieldNumber) has_secret = length > 0;
        }
        break;
      case 5:  // 32 bits
        if (!in.Skip(4)) return std::nullopt;
        break;
      default:  // groups, and wire types that do not exist
        return std::nullopt;
    }
  }
  if (!in.ConsumedEntireMessage() || in.CurrentPosition() != size || !has_secret) {
    return std::nullopt;
  }
  if (std::any_of(dir.begin(), dir.end(), [](char c) { return (c & 0x80) != 0; })) {
    v1::Ticket t;  // a parse checks the string's UTF-8
    if (!t.ParseFromArray(ticket.data(), size)) return std::nullopt;
  }
  return dir;
}

}  // namespace gpubroker::detail
