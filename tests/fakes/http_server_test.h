// HttpServerTest: a gtest fixture with an HttpTestServer on 127.0.0.1 (no handler yet: 404 for
// everything; tests install theirs with server_->SetHandler or Scoped) and a real HTTP transport
// (libcurl) to reach it. Derived fixtures that need more call HttpServerTest::SetUp() first.
//
// The transport is destroyed before the server (member order), so no request outlives the
// server that answers it.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <utility>

#include "blobclient/http_transport.h"
#include "tests/fakes/http_test_server.h"
#include "tests/testing/status_matchers.h"

namespace tierfs::testing {

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = HttpTestServer::Start();
    ASSERT_OK(s);
    server_ = std::move(*s);
    auto t = NewHttpTransport(HttpTransportOptions{});
    ASSERT_OK(t);
    transport_ = std::move(*t);
  }

  std::unique_ptr<HttpTestServer> server_;
  std::unique_ptr<HttpTransport> transport_;
};

}  // namespace tierfs::testing
