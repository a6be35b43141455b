#include "daemon/core/wait_list.h"

namespace gpubroker {

WaitId WaitList::Add(SessionId session, std::string tenant, Target target,
                     Clock::time_point deadline) {
  const WaitId id = next_id_++;
  if (target.id != 0) {
    by_buffer_[target.id].insert(id);
  } else {
    by_name_[NameKey{target.tenant, target.name}].insert(id);
  }
  by_session_[session].insert(id);
  per_tenant_[tenant]++;
  by_deadline_.emplace(deadline, id);
  entries_.emplace(id, Filed{session, std::move(tenant), std::move(target), deadline});
  return id;
}

bool WaitList::Remove(WaitId id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return false;
  const Filed& f = it->second;
  auto unfile = [id](auto& index, const auto& key) {
    auto set = index.find(key);
    if (set == index.end()) return;
    set->second.erase(id);
    if (set->second.empty()) index.erase(set);
  };
  if (f.target.id != 0) {
    unfile(by_buffer_, f.target.id);
  } else {
    unfile(by_name_, NameView{f.target.tenant, f.target.name});
  }
  unfile(by_session_, f.session);
  if (auto t = per_tenant_.find(f.tenant); t != per_tenant_.end() && --t->second == 0) {
    per_tenant_.erase(t);
  }
  by_deadline_.erase({f.deadline, id});
  entries_.erase(it);
  return true;
}

std::vector<WaitId> WaitList::Wakeable(BufferId id, const std::string& tenant,
                                       const std::string& name) const {
  std::vector<WaitId> out;
  if (auto it = by_buffer_.find(id); it != by_buffer_.end()) {
    out.insert(out.end(), it->second.begin(), it->second.end());
  }
  if (!name.empty()) {
    if (auto it = by_name_.find(NameView{tenant, name}); it != by_name_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
    }
  }
  return out;
}

std::vector<WaitId> WaitList::OfSession(SessionId session) const {
  auto it = by_session_.find(session);
  if (it == by_session_.end()) return {};
  return {it->second.begin(), it->second.end()};
}

std::vector<WaitId> WaitList::All() const {
  std::vector<WaitId> out;
  out.reserve(entries_.size());
  for (const auto& [id, f] : entries_) out.push_back(id);
  return out;
}

std::vector<WaitId> WaitList::Due(Clock::time_point now) const {
  std::vector<WaitId> out;
  for (const auto& [deadline, id] : by_deadline_) {
    if (deadline > now) break;
    out.push_back(id);
  }
  return out;
}

std::optional<WaitList::Clock::time_point> WaitList::NextDeadline() const {
  if (by_deadline_.empty()) return std::nullopt;
  return by_deadline_.begin()->first;
}

uint32_t WaitList::CountForSession(SessionId session) const {
  auto it = by_session_.find(session);
  return it == by_session_.end() ? 0 : static_cast<uint32_t>(it->second.size());
}

uint32_t WaitList::CountForTenant(const std::string& tenant) const {
  auto it = per_tenant_.find(tenant);
  return it == per_tenant_.end() ? 0 : it->second;
}

}  // namespace gpubroker
