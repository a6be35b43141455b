// An Open's or a Claim's answer read into a Grant (client/src/grant.h): from
// the daemon's flat bytes, in place, the client learns exactly what the
// message would have told it, every field and every part present or absent.
#include "client/src/grant.h"

#include <string>

#include "gtest/gtest.h"
#include "tests/buffer_info_expect.h"
#include "tests/unit/flat_layout_test_util.h"

namespace gpubroker::detail {
namespace {

void ExpectSameImport(const ImportFacts& a, const ImportFacts& b) {
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.region_id, b.region_id);
  EXPECT_EQ(a.offset, b.offset);
  EXPECT_EQ(a.mapped_size, b.mapped_size);
  EXPECT_EQ(a.fence_offset, b.fence_offset);
  EXPECT_EQ(a.fence_value, b.fence_value);
  EXPECT_EQ(a.fence_region_id, b.fence_region_id);
  EXPECT_EQ(a.allocation_id, b.allocation_id);
  EXPECT_EQ(a.export_data, b.export_data);
  EXPECT_EQ(a.device_uuid, b.device_uuid);
}

// The same answer both ways: flat, read in place, and as the message.
void ExpectFlatAsMessage(const v1::Reply& reply) {
  std::string flat;
  ASSERT_TRUE(AppendFlatAnswer(reply, &flat));
  Grant from_flat;
  ASSERT_TRUE(from_flat.TakeFlat(flat).ok());
  Grant from_message;
  from_message.Take(reply.has_claim() ? reply.claim() : reply.open());
  testing_util::ExpectSameInfo(from_flat.info, from_message.info);
  ExpectSameImport(from_flat.import, from_message.import);
}

TEST(Grant, AFlatAnswerTellsWhatItsMessageTells) {
  for (bool claim : {false, true}) {
    SCOPED_TRACE(claim ? "claim" : "open");
    v1::Reply reply;
    reply.set_request_id(17);
    v1::OpenResponse* a = claim ? reply.mutable_claim() : reply.mutable_open();
    testing_util::FillEveryField(a, 3);
    // The facts a real answer has, besides: a known state, kind and dtype.
    a->mutable_buffer()->set_state(v1::BUFFER_STATE_SEALED);
    a->mutable_buffer()->mutable_tensor()->set_dtype(v1::DTYPE_FLOAT32);
    a->mutable_import()->set_kind(v1::IMPORT_KIND_CUDA_POOL);
    ExpectFlatAsMessage(reply);
    a->clear_import();  // an Open that maps nothing is answered so
    ExpectFlatAsMessage(reply);
    a->mutable_buffer()->clear_tensor();
    ExpectFlatAsMessage(reply);
  }
}

TEST(Grant, AFlatPublishAnswerTellsWhatItsMessageTells) {
  v1::Reply reply;
  reply.set_request_id(5);
  testing_util::FillEveryField(reply.mutable_publish(), 4);
  reply.mutable_publish()->mutable_buffer()->set_state(v1::BUFFER_STATE_SEALED);
  std::string flat;
  ASSERT_TRUE(AppendFlatAnswer(reply, &flat));
  Grant from_flat;
  ASSERT_TRUE(from_flat.TakeFlat(flat).ok());
  Grant from_message;
  from_message.Take(reply.publish().buffer());
  testing_util::ExpectSameInfo(from_flat.info, from_message.info);
  EXPECT_EQ(from_flat.import.kind, v1::IMPORT_KIND_UNSPECIFIED);  // nothing to map
  EXPECT_EQ(from_message.import.kind, v1::IMPORT_KIND_UNSPECIFIED);
}

TEST(Grant, ItsImportViewsWhatItHolds) {
  v1::Reply reply;
  testing_util::FillEveryField(reply.mutable_open(), 5);
  std::string flat;
  ASSERT_TRUE(AppendFlatAnswer(reply, &flat));
  Grant grant;
  ASSERT_TRUE(grant.TakeFlat(flat).ok());
  flat.assign(flat.size(), '\0');  // the caller's copy goes; the grant's stays
  EXPECT_EQ(grant.import.device_uuid, reply.open().import().device_uuid());
  EXPECT_EQ(grant.import.export_data, reply.open().import().export_data());
}

TEST(Grant, BytesThatAreNotAnAnswerAreRefused) {
  v1::Reply reply;
  testing_util::FillEveryField(reply.mutable_open(), 2);
  std::string flat;
  ASSERT_TRUE(AppendFlatAnswer(reply, &flat));
  Grant grant;
  EXPECT_EQ(grant.TakeFlat(flat.substr(0, flat.size() - 1)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(grant.TakeFlat(flat + "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(grant.TakeFlat(flat).ok());
  EXPECT_EQ(grant.info.id, reply.open().buffer().id());
}

}  // namespace
}  // namespace gpubroker::detail
