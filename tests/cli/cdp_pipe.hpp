// A headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe: the
// browser reads commands on fd 3 and writes replies on fd 4, each a JSON text ended by '\0'), for
// tests that type into a page and click: Input.insertText types as a keyboard would, and
// Runtime.evaluate reads the DOM back. No network port and no WebSocket are involved. Debian's
// `chromium` (cmake/install-deps.sh).
#pragma once
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

namespace attnlab::testing {

class HeadlessChromium {
 public:
  // Starts the browser with a throwaway profile in `scratch` (its log in scratch/chromium.log)
  // and attaches to its page. std::runtime_error when it does not start within a minute.
  explicit HeadlessChromium(const std::filesystem::path& scratch) {
    int commands[2], replies[2];
    if (pipe2(commands, O_CLOEXEC) != 0 || pipe2(replies, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
    const std::string profile = "--user-data-dir=" + (scratch / "profile").string();
    const std::string log = (scratch / "chromium.log").string();
    pid_ = fork();
    if (pid_ == 0) {
      // Above fd 4 first, so that dup2 onto 3 and 4 cannot close an end still to be moved.
      const int in = fcntl(commands[0], F_DUPFD, 10), out = fcntl(replies[1], F_DUPFD, 10);
      dup2(in, 3);  // dup2 leaves the new descriptors open across exec
      dup2(out, 4);
      const int log_fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(log_fd, 1);
      dup2(log_fd, 2);
      execlp("chromium", "chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--window-size=1280,1000", "--remote-debugging-pipe", profile.c_str(), "about:blank", (char*)nullptr);
      _exit(127);
    }
    close(commands[0]);
    close(replies[1]);
    to_ = commands[1];
    from_ = replies[0];
    try {
      const nlohmann::json targets = call("Target.getTargets", {}, false);
      for (const auto& t : targets["targetInfos"])
        if (t["type"] == "page") {
          session_ = call("Target.attachToTarget", {{"targetId", t["targetId"]}, {"flatten", true}}, false)["sessionId"];
          break;
        }
      if (session_.empty()) throw std::runtime_error("chromium has no page target");
      call("Page.enable");
    } catch (...) {
      stop();
      throw;
    }
  }

  ~HeadlessChromium() { stop(); }
  HeadlessChromium(const HeadlessChromium&) = delete;
  HeadlessChromium& operator=(const HeadlessChromium&) = delete;

  // Closes the browser; killed when it has not exited 10 s later.
  void stop() {
    if (pid_ < 0) return;
    try {
      call("Browser.close", {}, false, 10);
    } catch (...) {
    }
    close(to_);
    close(from_);
    const pid_t pid = pid_;
    pid_ = -1;
    for (int i = 0; i < 100; ++i) {  // up to 10 s, then kill
      if (waitpid(pid, nullptr, WNOHANG) == pid) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }

  // One command; its "result". std::runtime_error on a protocol error or after `seconds`.
  nlohmann::json call(const std::string& method, nlohmann::json params = nlohmann::json::object(), bool on_page = true,
                      double seconds = 60) {
    const int id = next_id_++;
    nlohmann::json m = {{"id", id}, {"method", method}, {"params", params}};
    if (on_page) m["sessionId"] = session_;
    const std::string text = m.dump() + '\0';
    for (size_t done = 0; done < text.size();) {
      const ssize_t n = write(to_, text.data() + done, text.size() - done);
      if (n <= 0) throw std::runtime_error("chromium closed its command pipe");
      done += size_t(n);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    for (;;) {
      for (size_t end; (end = buffer_.find('\0')) != std::string::npos;) {
        const nlohmann::json reply = nlohmann::json::parse(buffer_.substr(0, end));
        buffer_.erase(0, end + 1);
        if (reply.value("id", -1) != id) continue;  // events and other replies
        if (reply.contains("error")) throw std::runtime_error(method + ": " + reply["error"].dump());
        return reply["result"];
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      pollfd p{from_, POLLIN, 0};
      if (left.count() <= 0 || poll(&p, 1, int(left.count())) <= 0)
        throw std::runtime_error(method + ": no reply from chromium within the time limit");
      char chunk[65536];
      const ssize_t n = read(from_, chunk, sizeof chunk);
      if (n <= 0) throw std::runtime_error(method + ": chromium closed its reply pipe");
      buffer_.append(chunk, size_t(n));
    }
  }

  // The value of a JavaScript expression on the page (promises awaited).
  nlohmann::json evaluate(const std::string& expression) {
    const nlohmann::json r =
        call("Runtime.evaluate", {{"expression", expression}, {"returnByValue", true}, {"awaitPromise", true}});
    if (r.contains("exceptionDetails")) throw std::runtime_error(expression + ": " + r["exceptionDetails"].dump());
    return r["result"].value("value", nlohmann::json());
  }

  // Polls `condition` (a JavaScript expression; throwing counts as false, as while the page
  // loads) until it is true; false after `seconds`.
  bool wait_for(const std::string& condition, double seconds = 60) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < deadline) {
      if (evaluate("(() => { try { return !!(" + condition + "); } catch (e) { return false; } })()") == true) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

  void navigate(const std::string& url) { call("Page.navigate", {{"url", url}}); }
  // Types `text` into the focused element as keyboard input.
  void type(const std::string& text) { call("Input.insertText", {{"text", text}}); }

 private:
  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
  int next_id_ = 1;
  std::string session_, buffer_;
};

}  // namespace attnlab::testing
