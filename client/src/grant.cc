#include "client/src/grant.h"

#include <utility>

#include "common/wire/tensor.h"

namespace gpubroker::detail {
namespace {

BufferState FromProto(v1::BufferState s) {
  switch (s) {
    case v1::BUFFER_STATE_SEALED:
      return BufferState::kSealed;
    case v1::BUFFER_STATE_FREED:
      return BufferState::kFreed;
    default:
      return BufferState::kAllocated;
  }
}

}  // namespace

BufferInfo FromProto(const v1::BufferInfo& b) {
  BufferInfo info;
  info.id = b.id();
  info.name = b.name();
  info.size = b.size();
  info.reserved_size = b.reserved_size();
  info.device_uuid = b.device_uuid();
  info.tenant = b.tenant();
  info.state = FromProto(b.state());
  if (b.has_tensor()) info.tensor = TensorFromProto<TensorDesc>(b.tensor());
  info.keep = b.keep();
  info.expires_unix_ms = b.expires_unix_ms();
  info.shared_with.assign(b.shared_with().begin(), b.shared_with().end());
  info.leases = b.leases();
  info.owner_session = b.owner_session();
  info.created_unix_ms = b.created_unix_ms();
  info.backing = b.backing();
  info.client_made = b.client_made();
  return info;
}

BufferInfo FromFlat(const FlatAnswerFacts& f) {
  BufferInfo info;
  if (!f.has_buffer) return info;
  info.id = f.id;
  info.name = f.name;
  info.size = f.size;
  info.reserved_size = f.reserved_size;
  info.device_uuid = f.device_uuid;
  info.tenant = f.tenant;
  info.state = FromProto(static_cast<v1::BufferState>(f.state));
  info.tensor = TensorFromFacts<TensorDesc>(f);
  info.keep = f.keep;
  info.expires_unix_ms = f.expires_unix_ms;
  info.shared_with.assign(f.shared_with.begin(), f.shared_with.end());
  info.leases = f.leases;
  info.owner_session = f.owner_session;
  info.created_unix_ms = f.created_unix_ms;
  info.backing = f.backing;
  info.client_made = f.client_made;
  return info;
}

ImportFacts FactsOf(const v1::ImportDescriptor& im) {
  ImportFacts f;
  f.kind = im.kind();
  f.region_id = im.region_id();
  f.offset = im.offset();
  f.mapped_size = im.mapped_size();
  f.fence_offset = im.fence_offset();
  f.fence_value = im.fence_value();
  f.fence_region_id = im.fence_region_id();
  f.allocation_id = im.allocation_id();
  f.export_data = im.export_data();
  f.device_uuid = im.device_uuid();
  return f;
}

absl::Status Grant::TakeFlat(std::string body) {
  flat_ = std::move(body);
  FlatAnswerRead read;
  if (absl::Status st = DecodeFlatAnswer(flat_, &read); !st.ok()) {
    flat_.clear();
    return st;
  }
  const FlatAnswerFacts& f = read.facts();
  info = FromFlat(f);
  import = ImportFacts{};
  if (f.has_import) {
    import.kind = static_cast<v1::ImportKind>(f.import_kind);
    import.region_id = f.region_id;
    import.offset = f.offset;
    import.mapped_size = f.mapped_size;
    import.fence_offset = f.fence_offset;
    import.fence_value = f.fence_value;
    import.fence_region_id = f.fence_region_id;
    import.allocation_id = f.allocation_id;
    import.export_data = f.export_data;  // views into flat_
    import.device_uuid = f.import_device_uuid;
  }
  return absl::OkStatus();
}

void Grant::Take(const v1::BufferInfo& buffer) {
  info = FromProto(buffer);
  import = ImportFacts{};
}

void Grant::Take(v1::OpenResponse response) {
  info = FromProto(response.buffer());
  message_ = std::move(*response.mutable_import());
  import = FactsOf(message_);
}

}  // namespace gpubroker::detail
