// End to end: a client whose connection to kiln-server breaks (here a TCP
// proxy between them drops every connection, or stops listening for a
// while) reconnects on its next call and keeps its session and handles.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "compiler/ir/hlo_parser.h"
#include "gtest/gtest.h"
#include "tests/server_process.h"

namespace kiln {
namespace {

using client::Client;

// Forwards 127.0.0.1:port() to 127.0.0.1:target. Drop() resets every
// connection; Close() also stops listening until Listen() again.
class TcpProxy {
 public:
  explicit TcpProxy(int target) : target_(target) { Listen(); }
  ~TcpProxy() {
    Close();
    for (std::thread& t : pumps_) t.join();
  }

  int port() const { return port_; }

  void Listen() {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(listener_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port_));
    if (bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      ADD_FAILURE() << "the proxy cannot listen on port " << port_ << " again";
      return;
    }
    socklen_t len = sizeof(addr);
    getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    listen(listener_, 16);
    stop_accepting_ = false;
    acceptor_ = std::thread([this] { AcceptLoop(); });
  }

  void Drop() {
    std::lock_guard<std::mutex> lock(mu_);
    for (int fd : live_) shutdown(fd, SHUT_RDWR);
  }

  void Close() {
    stop_accepting_ = true;
    if (acceptor_.joinable()) acceptor_.join();
    if (listener_ >= 0) close(listener_);
    listener_ = -1;
    Drop();
  }

 private:
  void AcceptLoop() {
    while (!stop_accepting_) {
      pollfd p{listener_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      const int in = accept(listener_, nullptr, nullptr);
      if (in < 0) continue;
      const int out = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = htons(static_cast<uint16_t>(target_));
      if (connect(out, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
        close(in);
        close(out);
        continue;
      }
      std::lock_guard<std::mutex> lock(mu_);
      live_.insert(in);
      live_.insert(out);
      pumps_.emplace_back([this, in, out] { Pump(in, out); });
    }
  }

  void Pump(int a, int b) {
    char buf[65536];
    pollfd fds[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
    bool open = true;
    while (open) {
      if (poll(fds, 2, 100) < 0) break;
      for (int i = 0; i < 2 && open; ++i) {
        if (fds[i].revents == 0) continue;
        const ssize_t n = read(fds[i].fd, buf, sizeof(buf));
        if (n <= 0) {
          open = false;
          break;
        }
        for (ssize_t done = 0; done < n;) {
          const ssize_t w = send(fds[1 - i].fd, buf + done, n - done, MSG_NOSIGNAL);
          if (w <= 0) {
            open = false;
            break;
          }
          done += w;
        }
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    live_.erase(a);
    live_.erase(b);
    close(a);
    close(b);
  }

  const int target_;
  int port_ = 0;
  int listener_ = -1;
  std::atomic<bool> stop_accepting_{false};
  std::thread acceptor_;
  std::mutex mu_;
  std::set<int> live_;
  std::vector<std::thread> pumps_;
};

int PortOf(const std::string& address) { return std::stoi(address.substr(address.rfind(':') + 1)); }

struct Held {
  std::shared_ptr<client::DeviceBuffer> x;
  std::shared_ptr<client::Executable> exe;
};

Held Prepare(Client& c) {
  Held h;
  auto m = ir::ParseModule("ENTRY e {\n x = f32[3] parameter(0)\n ROOT y = f32[3] add(x, x)\n}");
  EXPECT_TRUE(m.ok());
  auto exe = c.Compile(**m, "cpu:0");
  EXPECT_TRUE(exe.ok()) << exe.status();
  auto x = c.TransferToDevice(
      ir::Literal::FromVector<float>(ir::ElementType::kF32, {3}, {1, 2, 3}), "cpu:0");
  EXPECT_TRUE(x.ok()) << x.status();
  if (exe.ok()) h.exe = *exe;
  if (x.ok()) h.x = *x;
  return h;
}

// Reads the held buffer, then runs the held program on it: both handles
// still work. (The read is sent again when the connection broke under it;
// an execution is not, so the read comes first.)
void ExpectHandlesWork(Client& c, const Held& h) {
  auto x = c.TransferFromDevice(*h.x);
  ASSERT_TRUE(x.ok()) << x.status();
  EXPECT_EQ(x->data<float>()[1], 2.0f);
  auto r = c.Execute(*h.exe, {h.x});
  ASSERT_TRUE(r.ok()) << r.status();
  auto out = c.TransferFromDevice(*r->outputs[0]);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->data<float>()[2], 6.0f);
}

// A client through `proxy` whose calls wait `reconnect` for a broken
// connection.
absl::StatusOr<std::unique_ptr<Client>> ConnectThrough(const TcpProxy& proxy,
                                                       absl::Duration reconnect) {
  client::ConnectOptions options;
  options.reconnect_timeout = reconnect;
  return Client::Connect(absl::StrCat("127.0.0.1:", proxy.port()), options);
}

// Whether the held program runs again within `tries` attempts 250 ms apart
// (the channel reconnects on its own schedule).
bool RunsAgain(Client& c, const Held& h, int tries) {
  for (int i = 0; i < tries; ++i) {
    if (c.Execute(*h.exe, {h.x}).ok()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  return false;
}

int64_t SessionsOpened(Client& c) {
  auto m = c.Metrics();
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return -1;
  for (const auto& counter : m->counters()) {
    if (counter.name() == "sessions_opened") return counter.value();
  }
  return -1;
}

TEST(ReconnectE2E, ABrokenConnectionIsMadeAgainWithTheSameSessionAndHandles) {
  testing::ServerProcess server;
  ASSERT_FALSE(server.address().empty());
  TcpProxy proxy(PortOf(server.address()));
  auto c = Client::Connect(absl::StrCat("127.0.0.1:", proxy.port()));
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string session = (*c)->session_id();
  Held held = Prepare(**c);
  ASSERT_NE(held.x, nullptr);
  for (int i = 0; i < 3; ++i) {
    proxy.Drop();
    ExpectHandlesWork(**c, held);
  }
  EXPECT_EQ((*c)->session_id(), session);
  EXPECT_EQ(SessionsOpened(**c), 1);
}

TEST(ReconnectE2E, CallsWaitForAnOutageShorterThanTheReconnectTimeout) {
  testing::ServerProcess server;
  ASSERT_FALSE(server.address().empty());
  TcpProxy proxy(PortOf(server.address()));
  auto c = ConnectThrough(proxy, absl::Seconds(20));
  ASSERT_TRUE(c.ok()) << c.status();
  Held held = Prepare(**c);
  ASSERT_NE(held.x, nullptr);
  proxy.Close();
  std::thread back([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    proxy.Listen();
  });
  // Made while nothing listens: it waits for the connection instead of
  // failing.
  ExpectHandlesWork(**c, held);
  back.join();
  EXPECT_EQ(SessionsOpened(**c), 1);
}

TEST(ReconnectE2E, ALongerOutageFailsCallsCleanlyAndTheSessionCarriesOnAfterIt) {
  testing::ServerProcess server;
  ASSERT_FALSE(server.address().empty());
  TcpProxy proxy(PortOf(server.address()));
  auto c = ConnectThrough(proxy, absl::Milliseconds(500));
  ASSERT_TRUE(c.ok()) << c.status();
  Held held = Prepare(**c);
  ASSERT_NE(held.x, nullptr);
  proxy.Close();
  const auto start = std::chrono::steady_clock::now();
  auto failed = (*c)->Execute(*held.exe, {held.x});
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable) << failed.status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  proxy.Listen();
  // Within the lease the session and its handles are still there.
  ASSERT_TRUE(RunsAgain(**c, held, 40));
  ExpectHandlesWork(**c, held);
  EXPECT_EQ(SessionsOpened(**c), 1);
}

// The calls of one outage share its wait. Here each of the four calls
// below, a read among them that is tried five times, waited the whole
// reconnect timeout before (at least 6 x 1.5 s); now only the first waits,
// and the client finds the server again once it is back.
TEST(ReconnectE2E, AServerThatStaysAwayCostsOneWaitNotOnePerCall) {
  testing::ServerProcess server;
  ASSERT_FALSE(server.address().empty());
  TcpProxy proxy(PortOf(server.address()));
  auto c = ConnectThrough(proxy, absl::Milliseconds(1500));
  ASSERT_TRUE(c.ok()) << c.status();
  Held held = Prepare(**c);
  ASSERT_NE(held.x, nullptr);
  proxy.Close();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i) {
    auto failed = (*c)->Execute(*held.exe, {held.x});
    ASSERT_FALSE(failed.ok());
    EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable) << failed.status();
  }
  auto read = (*c)->TransferFromDevice(*held.x);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kUnavailable) << read.status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(6));
  proxy.Listen();
  ASSERT_TRUE(RunsAgain(**c, held, 60));
  ExpectHandlesWork(**c, held);
  EXPECT_EQ(SessionsOpened(**c), 1);
}

}  // namespace
}  // namespace kiln
