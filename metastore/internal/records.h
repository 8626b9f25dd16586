// The byte layouts of the metadata store's records (metastore/FORMAT.md): one encoder and one
// decoder per record type, and the keys of directory entries. Pure functions over bytes, no LMDB:
// the store (lmdb_meta_store.cc) writes and reads what these make. Thread-safe (no state).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/result.h"
#include "metastore/meta_store.h"

namespace tierfs::metastore_internal {

std::string EncodeDir(const DirRecord& r);
// Corruption for an unknown layout version or a short value.
Result<DirRecord> DecodeDir(std::string_view v);

// An entry with an owner (a file:// origin) is written in layout 2, one without in layout 1.
std::string EncodeEntry(const DirEntry& e);
// `name` is the entry's name (its key past the directory's prefix).
Result<DirEntry> DecodeEntry(std::string_view name, std::string_view v);

std::string EncodeBlock(const BlockRecord& r);
// Records of 33 and 45 bytes (older layouts of the same version) decode with the fields they lack
// left at their defaults.
Result<BlockRecord> DecodeBlock(std::string_view key, std::string_view v);
std::string_view BlockKeyView(const BlockKey& k);

std::string EncodeValue(std::string_view value);
Result<std::string_view> DecodeValue(std::string_view v);

// Entries of directory `dir_key` are keyed dir_key + '\0' + name: the NUL sorts before every
// other byte, so one directory's entries are contiguous and never interleave with those of a
// directory whose key extends dir_key ("a" vs "ab" vs "a/b").
std::string EntryPrefix(std::string_view dir_key);
std::string EntryKey(std::string_view dir_key, std::string_view name);

}  // namespace tierfs::metastore_internal
