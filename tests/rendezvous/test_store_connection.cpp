// The store protocol with no socket (rendezvous/store_connection.hpp): bytes in, replies out, parked and woken,
// driven through tests/support/local_connections.hpp.
#include <catch2/catch.hpp>

#include "proto/store/reply.hpp"
#include "proto/store/request.hpp"
#include "tests/support/local_connections.hpp"

using namespace meshrun;
using proto::QueryType;
using proto::Request;

namespace {

std::string request(QueryType type, std::vector<std::string> keys = {}, std::vector<std::string> values = {},
                    int64_t number = 0) {
  return proto::encode_request(Request{type, std::move(keys), std::move(values), number});
}

const std::string kStopWaiting = proto::encode_status(proto::WaitResponse::kStopWaiting);

// Two clients of one host on one store, each with the transport that records its replies.
struct TwoClients {
  testing::LocalHost host;
  std::shared_ptr<rendezvous::KvStore> store = std::make_shared<rendezvous::KvStore>();
  testing::RecordingTransport first_transport;
  testing::RecordingTransport second_transport;
  std::shared_ptr<rendezvous::StoreConnection> first = host.connect(first_transport, store);
  std::shared_ptr<rendezvous::StoreConnection> second = host.connect(second_transport, store);
};

}  // namespace

TEST_CASE("store protocol: requests split at every byte are answered in order", "[store_connection]") {
  testing::LocalHost host;
  testing::RecordingTransport transport;
  const auto store = std::make_shared<rendezvous::KvStore>();
  const auto connection = host.connect(transport, store);
  const std::string bytes = request(QueryType::kValidate, {}, {}, proto::kValidationMagic) +
                            request(QueryType::kSet, {"/k"}, {"v"}) + request(QueryType::kGet, {"/k"}) +
                            request(QueryType::kAdd, {"/n"}, {}, 5) + request(QueryType::kAdd, {"/n"}, {}, -2) +
                            request(QueryType::kCheck, {"/k", "/n"}) + request(QueryType::kGetNumKeys);
  for (const char byte : bytes) connection->receive(std::string_view(&byte, 1));
  CHECK(transport.sent == proto::encode_string("v") + proto::encode_int64(5) + proto::encode_int64(3) +
                              proto::encode_status(proto::CheckResponse::kReady) + proto::encode_int64(2));
  CHECK_FALSE(connection->closed());
}

TEST_CASE_METHOD(
    TwoClients, "store protocol: a WAIT parks the connection, later requests wait their turn, a SET elsewhere wakes it",
    "[store_connection]") {
  first->receive(request(QueryType::kWait, {"/a", "/b"}) + request(QueryType::kGet, {"/a"}));
  CHECK(first_transport.sent.empty());
  CHECK(host.parked() == 1);
  second->receive(request(QueryType::kSet, {"/a"}, {"1"}));
  CHECK(first_transport.sent.empty());  // one of two keys
  second->receive(request(QueryType::kSet, {"/b"}, {"2"}));
  CHECK(first_transport.sent == kStopWaiting + proto::encode_string("1"));
  CHECK(host.parked() == 0);
}

TEST_CASE_METHOD(TwoClients,
                 "store protocol: CANCEL_WAIT overtakes a pending wait, and a BARRIER releases on its last arrival",
                 "[store_connection]") {
  first->receive(request(QueryType::kWait, {"/never"}) + request(QueryType::kCancelWait));
  CHECK(first_transport.sent == proto::encode_status(proto::WaitResponse::kWaitCanceled));
  CHECK(host.parked() == 0);
  first_transport.sent.clear();
  first->receive(request(QueryType::kBarrier, {"/barrier"}, {}, 2));
  CHECK(first_transport.sent.empty());
  second->receive(request(QueryType::kBarrier, {"/barrier"}, {}, 2));
  CHECK(first_transport.sent == kStopWaiting);
  CHECK(second_transport.sent == kStopWaiting);
}

TEST_CASE("store protocol: a client whose replies are backlogged is answered once its transport drains",
          "[store_connection]") {
  proto::Limits limits;
  limits.max_reply_backlog_bytes = 64;
  testing::LocalHost host(limits);
  testing::RecordingTransport transport;
  const auto connection = host.connect(transport, std::make_shared<rendezvous::KvStore>());
  transport.unsent = 1000;  // the network has not taken the last replies
  CHECK_FALSE(connection->wants_input());
  connection->receive(request(QueryType::kGetNumKeys));
  CHECK(transport.sent.empty());
  transport.unsent = 0;
  CHECK(connection->wants_input());
  connection->resume();
  CHECK(transport.sent == proto::encode_int64(0));
}

TEST_CASE_METHOD(TwoClients, "store protocol: malformed bytes close only that connection, and its wait is cancelled",
                 "[store_connection]") {
  // The first client is the bad one.
  first->receive(request(QueryType::kWait, {"/k"}));
  CHECK(host.parked() == 1);
  first->receive(std::string("\xff\xfe garbage", 10));
  CHECK(first->closed());
  CHECK(first_transport.hung_up);
  CHECK(host.closed == 1);
  CHECK(host.parked() == 0);
  second->receive(request(QueryType::kSet, {"/k"}, {"v"}) + request(QueryType::kGet, {"/k"}));
  CHECK(second_transport.sent == proto::encode_string("v"));
  CHECK(first_transport.sent.empty());
}

TEST_CASE("store protocol: a rendezvous request is answered, or parked until the host finishes it",
          "[store_connection]") {
  testing::LocalHost host;
  testing::RecordingTransport transport;
  const auto connection = host.connect(transport, std::make_shared<rendezvous::KvStore>());
  connection->receive(request(QueryType::kMeshrun, {}, {R"({"op":"hello"})"}));
  CHECK(transport.sent == proto::encode_string(R"({"echo":{"op":"hello"}})"));
  transport.sent.clear();
  connection->receive(request(QueryType::kMeshrun, {}, {R"({"op":"await"})"}) + request(QueryType::kGetNumKeys));
  CHECK(connection->awaiting());
  CHECK(transport.sent.empty());
  REQUIRE(host.awaiting.size() == 1);
  host.awaiting[0]->finish_await({{"status", "assigned"}});
  CHECK(transport.sent == proto::encode_string(R"({"status":"assigned"})") + proto::encode_int64(0));
  connection->receive(request(QueryType::kMeshrun, {}, {"{not json"}));
  CHECK(connection->closed());
}
