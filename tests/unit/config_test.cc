// Options (flags, environment, config file) and tenants.
#include <cstdio>
#include <fstream>
#include <map>
#include <string>

#include "daemon/config/options.h"
#include "daemon/core/tenants.h"
#include "daemon/core/tensor.h"
#include "gtest/gtest.h"

namespace gpubroker {
namespace {

struct Env {
  std::map<std::string, std::string> vars;
  EnvLookup lookup() const {
    return [this](const char* name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  }
};

absl::StatusOr<ParsedCommandLine> Parse(std::vector<const char*> args, const Env& env = {}) {
  args.insert(args.begin(), "gpubrokerd");
  return ParseCommandLine(static_cast<int>(args.size()), args.data(), env.lookup());
}

std::string WriteTemp(const std::string& text) {
  char path[] = "/tmp/gpubroker-config-XXXXXX";
  int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  FILE* f = fdopen(fd, "w");
  std::fputs(text.c_str(), f);
  std::fclose(f);
  return path;
}

TEST(Options, Defaults) {
  auto p = Parse({});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->options.backend, "auto");
  EXPECT_EQ(p->options.host_pool_bytes, uint64_t{1} << 30);
  EXPECT_EQ(p->options.metrics_address, "127.0.0.1:9464");
  EXPECT_FALSE(p->options.socket_dir.empty());
}

TEST(Options, ASwitchNeedsNoValueButTakesOne) {
  EXPECT_FALSE(Parse({})->options.grpc_reflection);
  EXPECT_TRUE(Parse({"--grpc-reflection"})->options.grpc_reflection);
  // A switch does not swallow the next flag as its value.
  auto p = Parse({"--grpc-reflection", "--backend", "host"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->options.grpc_reflection);
  EXPECT_EQ(p->options.backend, "host");
  EXPECT_FALSE(Parse({"--grpc-reflection=false"})->options.grpc_reflection);
  Env env;
  env.vars["GPUBROKER_GRPC_REFLECTION"] = "yes";
  EXPECT_TRUE(Parse({}, env)->options.grpc_reflection);
  EXPECT_FALSE(Parse({"--grpc-reflection=off"}, env)->options.grpc_reflection);
  const std::string file = WriteTemp("grpc_reflection: true\n");
  EXPECT_TRUE(Parse({"--config", file.c_str()})->options.grpc_reflection);
  std::remove(file.c_str());
  auto bad = Parse({"--grpc-reflection=maybe"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("--grpc-reflection"), std::string::npos);
}

TEST(Options, FlagsBeatEnvironmentBeatsFile) {
  const std::string file = WriteTemp("backend: host\nlog_level: debug\nhost_pool_bytes: 2GiB\n");
  Env env;
  env.vars["GPUBROKER_CONFIG"] = file;
  env.vars["GPUBROKER_LOG_LEVEL"] = "warn";
  env.vars["GPUBROKER_HOST_POOL_BYTES"] = "3GiB";
  auto p = Parse({"--host-pool-bytes", "64MiB", "--socket-dir=/tmp/x"}, env);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->options.backend, "host");             // file
  EXPECT_EQ(p->options.log_level, "warn");           // env over file
  EXPECT_EQ(p->options.host_pool_bytes, 64u << 20);  // flag over env
  EXPECT_EQ(p->options.socket_dir, "/tmp/x");
  EXPECT_EQ(p->options.config_file, file);
  std::remove(file.c_str());
}

TEST(Options, BadValuesNameTheOptionAndTheSource) {
  auto p = Parse({"--backend", "tpu"});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(std::string(p.status().message()).find("--backend"), std::string::npos);
  EXPECT_NE(std::string(p.status().message()).find("tpu"), std::string::npos);

  Env env;
  env.vars["GPUBROKER_HOST_POOL_BYTES"] = "lots";
  p = Parse({}, env);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(std::string(p.status().message()).find("GPUBROKER_HOST_POOL_BYTES"), std::string::npos);

  EXPECT_FALSE(Parse({"--no-such-flag", "1"}).ok());
  EXPECT_FALSE(Parse({"--backend"}).ok());
  EXPECT_FALSE(Parse({"stray"}).ok());
  EXPECT_FALSE(Parse({"--metrics-address", "nope"}).ok());
  EXPECT_FALSE(Parse({"--metrics-address", "127.0.0.1:70000"}).ok());
  EXPECT_TRUE(Parse({"--metrics-address", ""}).ok());
  EXPECT_FALSE(Parse({"--log-level", "loud"}).ok());
  EXPECT_FALSE(Parse({"--hello-timeout", "0s"}).ok());
  const auto missing = Parse({"--config", "/nonexistent/gpubroker.yaml"});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(),
            "cannot read config file /nonexistent/gpubroker.yaml: No such file or directory");
}

TEST(ConfigFile, ReadsTenantsAndQuotas) {
  DaemonOptions o;
  auto s = ApplyConfigYaml(R"(
default_quota: 1GiB
tenants:
  - name: training
    uids: [1000, 1001]
    quota: 16GiB
  - name: serving
    gids: [2000]
    quota: unlimited
)",
                           "test.yaml", o);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(o.tenants.size(), 2u);
  EXPECT_EQ(o.tenants[0].name, "training");
  EXPECT_EQ(o.tenants[0].uids, (std::vector<uid_t>{1000, 1001}));
  EXPECT_EQ(o.tenants[0].quota_bytes, uint64_t{16} << 30);
  EXPECT_EQ(o.tenants[1].gids, (std::vector<gid_t>{2000}));
  EXPECT_EQ(o.tenants[1].quota_bytes, 0u);
  EXPECT_EQ(o.default_quota_bytes, uint64_t{1} << 30);
}

TEST(ConfigFile, RejectsWhatItDoesNotKnow) {
  DaemonOptions o;
  EXPECT_FALSE(ApplyConfigYaml("backnd: host\n", "t", o).ok());
  EXPECT_FALSE(ApplyConfigYaml("[1, 2]\n", "t", o).ok());
  EXPECT_FALSE(ApplyConfigYaml("tenants: {a: 1}\n", "t", o).ok());
  EXPECT_FALSE(ApplyConfigYaml("tenants:\n  - uids: [1]\n", "t", o).ok());
  EXPECT_FALSE(ApplyConfigYaml("tenants:\n  - name: a\n    uids: [x]\n", "t", o).ok());
  EXPECT_FALSE(ApplyConfigYaml("tenants:\n  - name: a\n    colour: red\n", "t", o).ok());
  EXPECT_FALSE(ApplyConfigYaml("tenants:\n  - name: a\n    quota: much\n", "t", o).ok());
  EXPECT_FALSE(ApplyConfigYaml("key: [unclosed\n", "t", o).ok());
  EXPECT_TRUE(ApplyConfigYaml("", "t", o).ok());
}

TEST(Options, MarkdownAndHelpCoverEveryOption) {
  const std::string md = OptionsMarkdown();
  const std::string help = HelpText("gpubrokerd");
  for (const auto& o : OptionTable()) {
    EXPECT_NE(md.find(std::string(o.env)), std::string::npos) << o.flag;
    EXPECT_NE(help.find(std::string("--") + std::string(o.flag)), std::string::npos) << o.flag;
  }
}

TEST(Tenants, MapsUidThenGidThenOwnTenant) {
  auto d = TenantDirectory::Create({{"train", {1000}, {}, 100}, {"serve", {}, {50}, 0}}, 7);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->TenantFor(1000, 50), "train");  // uid wins over gid
  EXPECT_EQ(d->TenantFor(1001, 50), "serve");
  EXPECT_EQ(d->TenantFor(1001, 51), "uid-1001");
  EXPECT_EQ(d->QuotaFor("train"), 100u);
  EXPECT_EQ(d->QuotaFor("serve"), 0u);
  EXPECT_EQ(d->QuotaFor("uid-1001"), 7u);
}

TEST(Tenants, RejectsAmbiguity) {
  EXPECT_FALSE(TenantDirectory::Create({{"a", {1}, {}, 0}, {"b", {1}, {}, 0}}, 0).ok());
  EXPECT_FALSE(TenantDirectory::Create({{"a", {}, {5}, 0}, {"b", {}, {5}, 0}}, 0).ok());
  EXPECT_FALSE(TenantDirectory::Create({{"a", {}, {}, 0}, {"a", {}, {}, 0}}, 0).ok());
  EXPECT_FALSE(TenantDirectory::Create({{"bad/name", {}, {}, 0}}, 0).ok());
}

TEST(Tenants, RefusesNamesReservedForUsersNoTenantLists) {
  auto d = TenantDirectory::Create({{"uid-1000", {2000}, {}, 0}}, 0);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("reserved"), std::string::npos) << d.status();
  EXPECT_FALSE(TenantDirectory::Create({{"uid-x", {}, {}, 0}}, 0).ok());
  EXPECT_TRUE(TenantDirectory::Create({{"uidx", {}, {}, 0}}, 0).ok());
}

TEST(Tenants, AdministratorsAreRootAndTheAdminGroup) {
  auto d = TenantDirectory::Create({}, 0, gid_t{4242});
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->IsAdmin({1, 0, 0, {}}));
  EXPECT_TRUE(d->IsAdmin({1, 1000, 4242, {}}));
  EXPECT_TRUE(d->IsAdmin({1, 1000, 1000, {27, 4242}}));
  EXPECT_FALSE(d->IsAdmin({1, 1000, 1000, {27}}));
  auto no_group = TenantDirectory::Create({}, 0);
  EXPECT_FALSE(no_group->IsAdmin({1, 1000, 4242, {4242}}));
}

TEST(Tensor, ValidatesExtentAgainstTheBuffer) {
  TensorDesc t{12, {4, 8}, {}, 0};  // float32 4x8 = 128 bytes
  EXPECT_TRUE(ValidateTensor(t, 128).ok());
  EXPECT_FALSE(ValidateTensor(t, 127).ok());
  t.byte_offset = 4;
  EXPECT_FALSE(ValidateTensor(t, 128).ok());
  EXPECT_TRUE(ValidateTensor(t, 132).ok());
  TensorDesc strided{12, {4, 8}, {16, 1}, 0};  // rows padded to 16 elements
  EXPECT_TRUE(ValidateTensor(strided, (3 * 16 + 7 + 1) * 4).ok());
  EXPECT_FALSE(ValidateTensor(strided, (3 * 16 + 7) * 4).ok());
  EXPECT_FALSE(ValidateTensor({99, {1}, {}, 0}, 1024).ok());
  EXPECT_FALSE(ValidateTensor({12, {-1}, {}, 0}, 1024).ok());
  EXPECT_FALSE(ValidateTensor({12, {2, 2}, {1}, 0}, 1024).ok());
  EXPECT_FALSE(ValidateTensor({12, {1 << 30, 1 << 30, 1 << 30}, {}, 0}, 1024).ok());
  EXPECT_TRUE(ValidateTensor({12, {0, 5}, {}, 0}, 1).ok());
}

}  // namespace
}  // namespace gpubroker
