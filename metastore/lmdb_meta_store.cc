// Placeholder until the LMDB store lands (same day); keeps every target linkable.
#include "metastore/meta_store.h"

namespace tierfs {

Result<std::unique_ptr<MetaStore>> NewLmdbMetaStore(const MetaStoreOptions& options) {
  return Status::NotSupported("the LMDB metastore is not implemented yet");
}

}  // namespace tierfs
