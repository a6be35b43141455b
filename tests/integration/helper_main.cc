// gpubroker-test-helper: a real client process for the integration tests.
// It reads one command per line on stdin and answers one line on stdout:
// "ok [data]" or "err CODE message" ("err RESOURCE_EXHAUSTED/quota message"
// when the refusal says why). Buffers are kept under test-chosen keys.
//
//   --socket-dir DIR   the daemon to talk to
//   --uid UID          become this user before connecting (tests of tenants; needs root)
//   --no-suballocate   every buffer is the daemon's (tests of the daemon's own buffers)
#include <grp.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gpubroker/client.hpp"
#include "tests/integration/helper_memory.h"

namespace {

using gpubroker::Buffer;
using gpubroker::Client;
using gpubroker::testing::Check;
using gpubroker::testing::Fill;
using gpubroker::testing::FirstNonZero;
using gpubroker::testing::Peek;
using gpubroker::testing::Poke;

std::map<std::string, std::string> Options(const std::vector<std::string>& words, size_t from) {
  std::map<std::string, std::string> out;
  for (size_t i = from; i < words.size(); ++i) {
    auto eq = words[i].find('=');
    if (eq == std::string::npos) {
      out[words[i]] = "";
    } else {
      out[words[i].substr(0, eq)] = words[i].substr(eq + 1);
    }
  }
  return out;
}

std::string Hex(const std::string& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

std::string Unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  }
  return out;
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, sep)) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// Each process produces buffers for the next one in a ring and consumes the
// previous one's: allocate, fill, seal; open the peer's (wait), verify, write
// an acknowledgement into it; wait for our own acknowledgement (seen through
// the shared memory itself), then free ours and release theirs.
std::string Churn(Client& client, int me, int ring, int cycles, const std::string& device) {
  const int prev = (me + ring - 1) % ring;
  constexpr uint64_t kAck = 8;  // last bytes: the consumer's acknowledgement
  for (int k = 0; k < cycles; ++k) {
    const uint64_t size = 4096 + static_cast<uint64_t>((k * 7919 + me * 104729) % 200000);
    gpubroker::AllocateOptions ao;
    ao.name = "churn." + std::to_string(me) + "." + std::to_string(k);
    ao.device = device;
    Buffer mine = client.allocate(size, ao);
    Fill(mine, static_cast<uint64_t>(me * 100000 + k), size - kAck);
    Poke(mine, size - 1, 0);
    mine.seal();

    gpubroker::OpenOptions oo;
    oo.wait = true;
    oo.timeout = std::chrono::seconds(60);
    Buffer theirs = client.open("churn." + std::to_string(prev) + "." + std::to_string(k), oo);
    const int64_t bad =
        Check(theirs, static_cast<uint64_t>(prev * 100000 + k), theirs.size() - kAck);
    if (bad >= 0)
      return "err DATA_LOSS cycle " + std::to_string(k) + " byte " + std::to_string(bad);
    Poke(theirs, theirs.size() - 1, 0xa5);

    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (Peek(mine, size - 1) != 0xa5) {
      if (std::chrono::steady_clock::now() > deadline) {
        return "err DEADLINE_EXCEEDED no acknowledgement in cycle " + std::to_string(k);
      }
      std::this_thread::yield();
    }
    mine.release();
    theirs.release();
  }
  return "ok cycles=" + std::to_string(cycles);
}

std::string Run(Client& client, std::map<std::string, Buffer>& buffers, const std::string& line) {
  const std::vector<std::string> w = Split(line, ' ');
  if (w.empty()) return "err INVALID_ARGUMENT empty command";
  const std::string& cmd = w[0];
  auto need = [&](size_t n) {
    if (w.size() < n) throw std::invalid_argument("too few arguments for " + cmd);
  };
  auto buffer = [&](const std::string& key) -> Buffer& {
    auto it = buffers.find(key);
    if (it == buffers.end()) throw std::invalid_argument("no buffer under key " + key);
    return it->second;
  };

  if (cmd == "ping") return "ok " + std::to_string(::getpid());
  if (cmd == "session")
    return "ok " + std::to_string(client.session().id) + " " + client.session().tenant;
  if (cmd == "alloc") {
    need(3);
    auto opts = Options(w, 3);
    gpubroker::AllocateOptions ao;
    if (opts.count("name")) ao.name = opts["name"];
    if (opts.count("device")) ao.device = opts["device"];
    ao.keep = opts.count("keep") > 0;
    if (opts.count("ttl")) ao.ttl = std::chrono::milliseconds(std::stoll(opts["ttl"]));
    if (opts.count("share")) ao.share_with = Split(opts["share"], ',');
    if (opts.count("tensor")) {  // tensor=float32:4x8
      auto parts = Split(opts["tensor"], ':');
      gpubroker::TensorDesc t;
      t.dtype = *gpubroker::DTypeFromName(parts.at(0));
      for (const auto& d : Split(parts.at(1), 'x')) t.shape.push_back(std::stoll(d));
      ao.tensor = t;
    }
    Buffer b = client.allocate(std::stoull(w[2]), ao);
    if (opts.count("publish")) b.publish();
    // A buffer this client made has no id until published (see "id").
    const std::string id = std::to_string(b.is_published() ? b.id() : 0);
    buffers[w[1]] = std::move(b);
    return "ok " + id;
  }
  if (cmd == "open") {
    need(3);
    auto opts = Options(w, 3);
    gpubroker::OpenOptions oo;
    if (opts.count("wait")) {
      oo.wait = true;
      oo.timeout = std::chrono::milliseconds(std::stoll(opts["wait"]));
    }
    oo.allow_unsealed = opts.count("unsealed") > 0;
    const bool by_id = opts.count("id") > 0;
    Buffer b = by_id ? client.open(static_cast<gpubroker::BufferId>(std::stoull(w[2])), oo)
                     : client.open(std::string_view(w[2]), oo);
    std::string out = "ok " + std::to_string(b.id()) + " " + std::to_string(b.size());
    if (b.tensor()) {
      out += " " + std::string(gpubroker::DTypeName(b.tensor()->dtype)) + ":";
      for (size_t i = 0; i < b.tensor()->shape.size(); ++i) {
        out += (i ? "x" : "") + std::to_string(b.tensor()->shape[i]);
      }
    }
    buffers[w[1]] = std::move(b);
    return out;
  }
  if (cmd == "fill") {
    need(3);
    Buffer& b = buffer(w[1]);
    Fill(b, std::stoull(w[2]), b.size());
    return "ok";
  }
  if (cmd == "check") {  // check KEY SEED [stream]: with "stream", wait for the fence
    need(3);
    Buffer& b = buffer(w[1]);
    b.settle_claim();  // a refused posted claim has no memory to check
    const int64_t bad = Check(b, std::stoull(w[2]), b.size(), Options(w, 3).count("stream") > 0);
    if (bad >= 0) return "err DATA_LOSS mismatch at byte " + std::to_string(bad);
    return "ok";
  }
  if (cmd == "zeros") {  // zeros KEY: every byte of the buffer is 0
    need(2);
    Buffer& b = buffer(w[1]);
    const int64_t bad = FirstNonZero(b, b.size());
    if (bad >= 0) {
      return "err DATA_LOSS byte " + std::to_string(bad) + " is " +
             std::to_string(Peek(b, static_cast<uint64_t>(bad)));
    }
    return "ok";
  }
  if (cmd == "slowfill") {  // slowfill KEY SEED DELAY_MS: fill after a delay, seal at once
    need(4);
    gpubroker::testing::SlowFillAndSeal(buffer(w[1]), std::stoull(w[2]), std::stoi(w[3]));
    return "ok";
  }
  if (cmd == "drain") {
    gpubroker::testing::Drain();
    return "ok";
  }
  if (cmd == "poke") {
    need(4);
    Poke(buffer(w[1]), std::stoull(w[2]), static_cast<uint8_t>(std::stoul(w[3])));
    return "ok";
  }
  if (cmd == "peek") {
    need(3);
    return "ok " + std::to_string(Peek(buffer(w[1]), std::stoull(w[2])));
  }
  if (cmd == "info") {
    need(2);
    const auto& i = buffer(w[1]).info();
    return "ok backing=" + i.backing + " device=" + i.device_uuid +
           " size=" + std::to_string(i.size) + " reserved=" + std::to_string(i.reserved_size);
  }
  if (cmd == "id") {  // publishes a client-made buffer, as Buffer::id() does
    need(2);
    return "ok " + std::to_string(buffer(w[1]).id());
  }
  if (cmd == "publish") {
    need(2);
    buffer(w[1]).publish();
    return "ok " + std::to_string(buffer(w[1]).id());
  }
  if (cmd == "trim") {
    client.trim();
    return "ok";
  }
  if (cmd == "stats") {  // the client's own books and paths
    const auto s = client.stats();
    return "ok client_made=" + std::to_string(s.client_made) +
           " daemon_session=" + std::to_string(s.daemon_session) +
           " daemon_grpc=" + std::to_string(s.daemon_grpc) +
           " publishes=" + std::to_string(s.publishes) + " ranges=" + std::to_string(s.ranges) +
           " range_bytes=" + std::to_string(s.range_bytes) +
           " in_use_blocks=" + std::to_string(s.in_use_blocks) +
           " in_use_bytes=" + std::to_string(s.in_use_bytes) +
           " quarantined_bytes=" + std::to_string(s.quarantined_bytes) +
           " pending_releases=" + std::to_string(s.pending_releases) +
           " unsynced_releases=" + std::to_string(s.unsynced_releases) +
           " maps_mapped=" + std::to_string(s.maps_mapped) +
           " maps_imported=" + std::to_string(s.maps_imported) +
           " maps_cached=" + std::to_string(s.maps_cached) +
           " cache_hits=" + std::to_string(s.mapping_cache_hits) +
           " cache_misses=" + std::to_string(s.mapping_cache_misses) +
           " cache_evictions=" + std::to_string(s.mapping_cache_evictions) +
           " cache_entries=" + std::to_string(s.mapping_cache_entries) +
           " cache_bytes=" + std::to_string(s.mapping_cache_bytes);
  }
  if (cmd == "evict") {  // unmap every kept mapping
    client.evict_mappings();
    return "ok";
  }
  if (cmd == "addr") {  // where the buffer is mapped in this process
    need(2);
    return "ok " + std::to_string(reinterpret_cast<uintptr_t>(buffer(w[1]).data()));
  }
  if (cmd == "seal") {  // seal KEY [posted]
    need(2);
    if (w.size() > 2 && w[2] == "posted") {
      buffer(w[1]).seal_posted();
    } else {
      buffer(w[1]).seal();
    }
    return "ok";
  }
  if (cmd == "ticket") {  // ticket KEY [TTL_MS]: the ticket's bytes in hex
    need(2);
    const auto ttl = std::chrono::milliseconds(w.size() > 2 ? std::stoll(w[2]) : 60000);
    return "ok " + Hex(buffer(w[1]).ticket(ttl));
  }
  if (cmd == "claim") {  // claim KEY HEX [posted]: as "open" answers
    need(3);
    const std::string ticket = Unhex(w[2]);
    Buffer b =
        w.size() > 3 && w[3] == "posted" ? client.claim_posted(ticket) : client.claim(ticket);
    std::string out = "ok " + std::to_string(b.id()) + " " + std::to_string(b.size());
    buffers[w[1]] = std::move(b);
    return out;
  }
  if (cmd == "release") {
    need(2);
    buffer(w[1]).release();
    buffers.erase(w[1]);
    return "ok";
  }
  if (cmd == "free") {
    need(2);
    auto info = client.free(std::string_view(w[1]));
    return "ok " + std::to_string(info.id);
  }
  if (cmd == "list") return "ok " + gpubroker::ToJson(client.list());
  if (cmd == "status") return "ok " + gpubroker::ToJson(client.status());
  if (cmd == "churn") {  // churn ME RING CYCLES [device=D]
    need(4);
    auto opts = Options(w, 4);
    return Churn(client, std::stoi(w[1]), std::stoi(w[2]), std::stoi(w[3]), opts["device"]);
  }
  return "err INVALID_ARGUMENT unknown command " + cmd;
}

}  // namespace

int main(int argc, char** argv) {
  std::string socket_dir;
  long uid = -1;
  gpubroker::ConnectOptions options;
  options.client_name = "test-helper";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--socket-dir" && i + 1 < argc) {
      socket_dir = argv[++i];
    } else if (a == "--uid" && i + 1 < argc) {
      uid = std::stol(argv[++i]);
    } else if (a == "--no-suballocate") {
      options.suballocate = false;
    } else {
      std::cerr << "gpubroker-test-helper: unknown argument " << a << "\n";
      return 2;
    }
  }
  if (uid >= 0) {
    // Keep gid 0 so the 0660 sockets stay reachable; the tenant comes from the uid.
    if (::setgroups(0, nullptr) != 0 || ::setuid(static_cast<uid_t>(uid)) != 0) {
      std::cout << "err PERMISSION_DENIED cannot become uid " << uid << ": " << std::strerror(errno)
                << std::endl;
      return 1;
    }
  }
  std::map<std::string, Buffer> buffers;
  std::optional<Client> client;
  try {
    client = Client::connect(socket_dir, options);
  } catch (const gpubroker::Error& e) {
    std::cout << "err " << gpubroker::ErrorCodeName(e.code()) << " " << e.message() << std::endl;
    return 1;
  }
  std::cout << "ok ready " << ::getpid() << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line == "exit") {
      std::cout << "ok" << std::endl;
      break;
    }
    std::string reply;
    try {
      reply = Run(*client, buffers, line);
    } catch (const gpubroker::Error& e) {
      reply = std::string("err ") + gpubroker::ErrorCodeName(e.code());
      if (e.reason() != gpubroker::RefusalReason::kNone) {
        reply += std::string("/") + gpubroker::RefusalReasonName(e.reason());
      }
      reply += " " + e.message();
    } catch (const std::exception& e) {
      reply = std::string("err INVALID_ARGUMENT ") + e.what();
    }
    std::cout << reply << std::endl;
  }
  buffers.clear();
  return 0;
}
