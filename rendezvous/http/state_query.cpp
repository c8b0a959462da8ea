#include "rendezvous/http/state_query.hpp"

namespace meshrun::rendezvous::http {
namespace {

// One question in flight. Touched only on the HTTP thread; the io thread holds just a weak_ptr to it,
// so nothing of the HTTP side is used or destroyed over there.
struct Pending {
  explicit Pending(boost::asio::io_context& io) : timer(io) {}
  boost::asio::steady_timer timer;
  SnapshotHandler done;
  std::chrono::steady_clock::time_point asked = std::chrono::steady_clock::now();
  bool answered = false;

  void finish(std::shared_ptr<const LiveSnapshot> snapshot) {
    if (answered) return;
    answered = true;
    timer.cancel();
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - asked).count();
    auto handler = std::move(done);
    handler(std::move(snapshot), took);
  }
};

}  // namespace

void StateQuery::ask(std::chrono::milliseconds deadline, SnapshotHandler done) {
  auto pending = std::make_shared<Pending>(http_io_);
  pending->done = std::move(done);
  // The timer's handler owns the question until the deadline, or until the answer cancels it.
  pending->timer.expires_after(deadline);
  pending->timer.async_wait([pending](boost::system::error_code ec) {
    if (!ec) pending->finish(nullptr);
  });
  std::weak_ptr<Pending> weak = pending;
  boost::asio::post(state_io_, [weak, &live = live_, http = http_io_.get_executor()] {
    auto snapshot = std::make_shared<const LiveSnapshot>(live.snapshot());
    boost::asio::post(http, [weak, snapshot] {
      if (auto p = weak.lock()) p->finish(snapshot);
    });
  });
}

}  // namespace meshrun::rendezvous::http
