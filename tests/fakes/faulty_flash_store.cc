#include "tests/fakes/faulty_flash_store.h"

namespace tierfs::testing {

void FaultyFlashStore::FailWrites(int n, Status status) {
  MutexLock l(&mu_);
  fail_writes_ = n;
  write_status_ = std::move(status);
}

void FaultyFlashStore::FailReads(int n, Status status) {
  MutexLock l(&mu_);
  fail_reads_ = n;
  read_status_ = std::move(status);
}

void FaultyFlashStore::SetFreeBytes(std::optional<uint64_t> bytes) {
  MutexLock l(&mu_);
  free_bytes_ = bytes;
}

Status FaultyFlashStore::WriteFile(const std::string& rel_path, std::span<const std::byte> data,
                                   std::span<const std::byte> trailer) {
  ++writes_;
  {
    MutexLock l(&mu_);
    if (fail_writes_ > 0) {
      --fail_writes_;
      return write_status_;
    }
  }
  return base_->WriteFile(rel_path, data, trailer);
}

Status FaultyFlashStore::TakeRead() {
  ++reads_;
  MutexLock l(&mu_);
  if (fail_reads_ == 0) return Status::OK();
  --fail_reads_;
  return read_status_;
}

Result<size_t> FaultyFlashStore::ReadFile(const std::string& rel_path, std::span<std::byte> out) {
  TIERFS_RETURN_IF_ERROR(TakeRead());
  return base_->ReadFile(rel_path, out);
}

Status FaultyFlashStore::ReadAt(const std::string& rel_path, std::span<const ReadRange> ranges) {
  TIERFS_RETURN_IF_ERROR(TakeRead());
  return base_->ReadAt(rel_path, ranges);
}

Status FaultyFlashStore::RemoveFile(const std::string& rel_path) {
  return base_->RemoveFile(rel_path);
}

Result<int> FaultyFlashStore::OpenForRead(const std::string& rel_path) {
  TIERFS_RETURN_IF_ERROR(TakeRead());
  return base_->OpenForRead(rel_path);
}

Status FaultyFlashStore::WillNeed(const std::string& rel_path) { return base_->WillNeed(rel_path); }

Result<uint64_t> FaultyFlashStore::FreeBytes() {
  ++free_calls_;
  {
    MutexLock l(&mu_);
    if (free_bytes_) return *free_bytes_;
  }
  return base_->FreeBytes();
}

Status FaultyFlashStore::ListFiles(std::vector<std::string>* out) { return base_->ListFiles(out); }

}  // namespace tierfs::testing
