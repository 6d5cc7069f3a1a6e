// `attnlab viz RUN --serve` (experiments/cli/viz_serve.cpp): the request parser on malformed
// queries, the input encoders, the service on tiny runs (the maps of an input have the model's
// shape and change with the input), the server process on a free port (API answers, 4xx for bad
// requests, a clean stop on SIGTERM), and the page in headless Chromium (type, submit, the maps
// change, a refused input shows the server's message). The tiny runs are the fixtures of
// lm_run.hpp and test_analyze.cpp's ListOps run.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <regex>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "cli/cdp_pipe.hpp"
#include "cli/lm_run.hpp"
#include "experiments/cli/viz_parts.hpp"
#include "experiments/cli/viz_request.hpp"

namespace {

namespace fs = std::filesystem;
using namespace attnlab;
using namespace attnlab::testing;
using nlohmann::json;

// ListOps, 2 layers of mha(heads=2), 4 steps: as test_analyze.cpp's listops_run.
fs::path tiny_listops_run(const std::string& name) {
  const fs::path dir = fresh_run_dir("viz_serve", name);
  std::string console;
  REQUIRE_MESSAGE(run_catalog("classify", dir,
                              {"task.train_size=64", "task.val_size=24", "task.test_size=8", "task.length=40",
                               "model.attention=mha(heads=2)", "train.steps=4", "train.eval_every=4", "model.d_model=16",
                               "model.ffn_hidden=32"},
                              {}, &console) == 0,
                  console);
  return dir;
}

// The status and message of parse_attend_query's RequestError (0 when it parses).
std::pair<int, std::string> refusal(std::string_view query, size_t limit = 64) {
  try {
    cli::parse_attend_query(query, limit);
    return {0, ""};
  } catch (const cli::RequestError& e) {
    return {e.status, e.what()};
  }
}

TEST_CASE("viz serve: parse_attend_query refuses malformed queries with 400 or 413 and names the problem") {
  const cli::AttendQuery ok = cli::parse_attend_query("input=ab%20c+d%0Ae%C3%A9&", 64);
  REQUIRE(ok.input);
  CHECK(*ok.input == "ab c d\ne\xc3\xa9");
  CHECK(cli::parse_attend_query("example=12", 64).example == 12);
  const std::vector<std::tuple<std::string, int, std::string>> cases = {
      {"", 400, "no input"},
      {"input=", 400, "input is empty"},
      {"input=%G1", 400, "bad percent escape '%G1' at byte 0"},
      {"input=abc%4", 400, "bad percent escape '%4'"},
      {"input=%", 400, "bad percent escape"},
      {"input=%FF", 400, "not valid UTF-8: byte 0xff at offset 0"},
      {"input=a%C3", 400, "not valid UTF-8: byte 0xc3 at offset 1"},
      {"input=%C0%AF", 400, "not valid UTF-8"},        // overlong '/'
      {"input=%ED%A0%80", 400, "not valid UTF-8"},     // a UTF-16 surrogate
      {"input=%F4%90%80%80", 400, "not valid UTF-8"},  // beyond U+10FFFF
      {"input=a%00b", 400, "control byte 0x00 at offset 1"},
      {"input=a&input=b", 400, "input is given twice"},
      {"input=a&example=1", 400, "not both"},
      {"example=-1", 400, "non-negative integer"},
      {"example=1x", 400, "got '1x'"},
      {"example=99999999999999999999999", 400, "non-negative integer"},
      {"layer=1", 400, "unknown parameter 'layer'"},
      {"%FF=1", 400, "not valid UTF-8"},
      {"input=" + std::string(65, 'a'), 413, "limit of 64 bytes"},
      {"input=" + std::string(40, 'a') + std::string(25, '+'), 413, "limit of 64 bytes"},
  };
  for (const auto& [query, status, message] : cases) {
    const auto [got, text] = refusal(query);
    CHECK_MESSAGE(got == status, query);
    CHECK_MESSAGE(text.find(message) != std::string::npos, query << " -> " << text);
  }
  CHECK(refusal("input=" + std::string(64, 'a')).first == 0);  // at the limit
}

TEST_CASE("viz serve: encode_input reads a language model's text by byte and a token task's text by token") {
  runner::TaskData lm;
  lm.name = "fortunes";
  lm.language_model = true;
  lm.token_bytes = {'a', 'b', ' '};
  lm.vocab_size = 3;
  CHECK(cli::encode_input(lm, "ab a", 8) == std::vector<int64_t>{0, 1, 2, 0});
  CHECK(cli::input_text(lm, {1, 2, 0}) == "b a");
  CHECK_THROWS_WITH_AS(cli::encode_input(lm, "abc", 8), doctest::Contains("byte 'c' at offset 2"), cli::RequestError);
  CHECK_THROWS_WITH_AS(cli::encode_input(lm, "aaaaa", 4), doctest::Contains("more than 4 tokens"), cli::RequestError);
  lm.token_unk = true;  // id 0 is <unk>: bytes outside the vocabulary map to it
  lm.token_bytes = {0, 'a', 'b'};
  CHECK(cli::encode_input(lm, "axb", 8) == std::vector<int64_t>{1, 0, 2});

  runner::TaskData listops;
  listops.name = "listops";
  listops.tokens = {"<pad>", "0", "1", "[MAX", "]"};
  listops.vocab_size = 5;
  listops.pad_id = 0;
  CHECK(cli::encode_input(listops, " [MAX 1\t0\n] ", 8) == std::vector<int64_t>{3, 2, 1, 4});
  CHECK(cli::input_text(listops, {3, 2, 1, 4, 0, 0}) == "[MAX 1 0 ]");
  CHECK_THROWS_WITH_AS(cli::encode_input(listops, "[MAX 7 ]", 8), doctest::Contains("'7' at offset 5 is not a token"),
                       cli::RequestError);
  CHECK_THROWS_WITH_AS(cli::encode_input(listops, "1 <pad>", 8), doctest::Contains("padding"), cli::RequestError);
  CHECK_THROWS_WITH_AS(cli::encode_input(listops, "   ", 8), doctest::Contains("no tokens"), cli::RequestError);
  runner::TaskData images;
  images.name = "fashion_mnist";
  images.input_dim = 16;
  CHECK_THROWS_WITH_AS(cli::encode_input(images, "1 2", 8), doctest::Contains("feature vectors"), cli::RequestError);
}

// The number of weights a base64 map holds (2 bytes each).
size_t map_weights(const std::string& b64) {
  const size_t pad = b64.size() >= 2 ? (b64[b64.size() - 1] == '=') + (b64[b64.size() - 2] == '=') : 0;
  return (b64.size() / 4 * 3 - pad) / 2;
}

TEST_CASE("viz serve: the service answers an input with every head's map, and the maps change with the input") {
  const fs::path run = tiny_lm_run("viz_serve", "lm");
  cli::VizOptions o;
  o.run_dir = run;
  o.max_tokens = 16;
  cli::viz_detail::VizService service(o);
  CHECK(service.max_tokens() == 16);
  CHECK(service.page().find("\"serve\":{") != std::string::npos);

  const auto a = service.attend("input=the+cat");
  REQUIRE_MESSAGE(a.status == 200, a.body);
  const json ja = json::parse(a.body);
  CHECK(ja["tokens"].size() == 7);
  CHECK(ja["layers"] == json::array({2}));  // one block of mha(heads=2)
  REQUIRE(ja["maps"].size() == 1);
  REQUIRE(ja["maps"][0].size() == 2);
  for (const json& m : ja["maps"][0]) CHECK(map_weights(m.get<std::string>()) == 49);
  CHECK(ja["prediction"]["kind"] == "next_token");
  CHECK(ja["prediction"]["positions"].size() == 7);
  CHECK(ja["prediction"]["top"].size() == 5);
  const json jb = json::parse(service.attend("input=the+dog").body);
  CHECK(jb["maps"][0][0] != ja["maps"][0][0]);  // a different last token: different weights in its row
  CHECK(json::parse(service.attend("example=1").body)["tokens"].size() == 16);

  const auto long_input = service.attend("input=" + std::string(17, 'e'));
  CHECK(long_input.status == 413);
  CHECK(json::parse(long_input.body)["error"].get<std::string>().find("more than 16 tokens") != std::string::npos);
  CHECK(service.attend("input=%FF").status == 400);
  CHECK(service.attend("example=100000").status == 404);
  fs::remove_all(run);
}

TEST_CASE("viz serve: a classifier's example is picked or edited as tokens, and the prediction is a class") {
  const fs::path run = tiny_listops_run("listops");
  cli::VizOptions o;
  o.run_dir = run;
  cli::viz_detail::VizService service(o);
  const std::string page = service.page();
  CHECK(page.find("\"mode\":\"tokens\"") != std::string::npos);
  const auto picked = service.attend("example=0");
  REQUIRE_MESSAGE(picked.status == 200, picked.body);
  const json p = json::parse(picked.body);
  CHECK(p["prediction"]["kind"] == "class");
  CHECK(p["layers"] == json::array({2, 2}));
  const std::string text = p["input"];
  REQUIRE(!text.empty());
  // The example's own text reproduces its maps; an edit changes them.
  const json same = json::parse(service.attend("input=" + std::regex_replace(text, std::regex(" "), "+")).body);
  CHECK(same["maps"] == p["maps"]);
  const json edited = json::parse(service.attend("input=[MAX+2+[MIN+4+7+]+0+]").body);
  // The 8 tokens and, when the model has one, its CLS position; padding is not shown.
  const size_t words = size_t(std::count(text.begin(), text.end(), ' ')) + 1, cls = p["tokens"].size() - words;
  CHECK(cls <= 1);
  CHECK(edited["tokens"].size() == 8 + cls);
  CHECK(edited["maps"][0][0] != p["maps"][0][0]);
  const auto bad = service.attend("input=[MAX+2+x+]");
  CHECK(bad.status == 400);
  CHECK(bad.body.find("'x' at offset 7 is not a token of task 'listops'") != std::string::npos);
  fs::remove_all(run);
}

// `attnlab viz RUN --serve --port 0` as a child process: its port from the first line it prints.
class ServerProcess {
 public:
  explicit ServerProcess(const fs::path& run) : log_(run / "serve.log") {
    int out[2];
    REQUIRE(pipe(out) == 0);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], 1);
      const int err = open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(err, 2);
      close(out[0]);
      execl(ATTNLAB_BINARY_DIR "/attnlab", "attnlab", "viz", run.c_str(), "--serve", "--port", "0", "--max-tokens", "16",
            (char*)nullptr);
      _exit(127);
    }
    close(out[1]);
    out_ = out[0];
    const std::string first = read_until("\n", 60);
    std::smatch m;
    REQUIRE_MESSAGE(std::regex_search(first, m, std::regex(R"(serving http://127\.0\.0\.1:(\d+)/)")), first, slurp(log_));
    port = std::stoi(m[1]);
  }
  ~ServerProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    close(out_);
  }
  // Sends `signal`; the exit status (-1: killed after 20 s) and what it printed after the first line.
  std::pair<int, std::string> stop(int signal) {
    kill(pid_, signal);
    const std::string rest = read_until("", 20);  // to end of file
    int status = 0;
    for (int i = 0; i < 200 && waitpid(pid_, &status, WNOHANG) == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (waitpid(pid_, &status, WNOHANG) == 0) return {-1, rest};
    pid_ = -1;
    return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), rest};
  }
  int port = 0;

 private:
  std::string read_until(const std::string& end, double seconds) {
    std::string text;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (end.empty() || text.find(end) == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      pollfd p{out_, POLLIN, 0};
      if (left.count() <= 0 || poll(&p, 1, int(left.count())) <= 0) break;
      char c[4096];
      const ssize_t n = read(out_, c, sizeof c);
      if (n <= 0) break;
      text.append(c, size_t(n));
    }
    return text;
  }
  fs::path log_;
  pid_t pid_ = -1;
  int out_ = -1;
};

// One raw request to 127.0.0.1:port; the response's status and body.
std::pair<int, std::string> http(int port, const std::string& request) {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(write(s, request.data(), request.size()) == ssize_t(request.size()));
  std::string text;
  char c[65536];
  pollfd p{s, POLLIN, 0};
  // Until the server closes or the body of Content-Length bytes is in (a refused request line
  // leaves the connection open for keep-alive).
  const std::regex length(R"(\r\nContent-Length: (\d+)\r\n)", std::regex::icase);
  while (poll(&p, 1, 30000) > 0) {
    const ssize_t n = read(s, c, sizeof c);
    if (n <= 0) break;
    text.append(c, size_t(n));
    const size_t head = text.find("\r\n\r\n");
    std::smatch m;
    const std::string header = text.substr(0, head == std::string::npos ? 0 : head + 2);
    if (head != std::string::npos && std::regex_search(header, m, length) && text.size() >= head + 4 + std::stoul(m[1])) break;
  }
  close(s);
  std::smatch m;
  if (!std::regex_search(text, m, std::regex(R"(^HTTP/1\.1 (\d+))"))) return {0, text};
  const size_t body = text.find("\r\n\r\n");
  return {std::stoi(m[1]), body == std::string::npos ? "" : text.substr(body + 4)};
}
std::pair<int, std::string> get(int port, const std::string& target) {
  return http(port, "GET " + target + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
}

TEST_CASE("viz serve: the server answers the API on a free port, refuses malformed requests with 4xx, stops on SIGTERM") {
  const fs::path run = tiny_lm_run("viz_serve", "process");
  ServerProcess server(run);
  const auto [page_status, page] = get(server.port, "/");
  CHECK(page_status == 200);
  CHECK(page.find("id=\"ask\"") != std::string::npos);
  const auto [status, body] = get(server.port, "/api/attend?input=hello");
  REQUIRE_MESSAGE(status == 200, body);
  CHECK(json::parse(body)["tokens"].size() == 5);
  const std::vector<std::pair<std::string, int>> bad = {
      {"GET /api/attend?input=" + std::string(200, 'a') + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 413},
      {"GET /api/attend?input=%FF HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 400},
      {"GET /api/attend?input=%ZZ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 400},
      {"GET /api/attend?nothing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 400},
      {"GET /nowhere HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 404},
      {"POST /api/attend HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc", 0},  // 0: some 4xx
      {"\x01\x02\xff garbage\r\n\r\n", 400},
      {"GET /" + std::string(10000, 'a') + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 414},
  };
  for (const auto& [request, want] : bad) {
    const auto [got, text] = http(server.port, request);
    CHECK_MESSAGE((want ? got == want : got >= 400 && got < 500), request.substr(0, 60) << " -> " << got << " " << text);
    if (want != 414) CHECK_MESSAGE(text.find("\"error\"") != std::string::npos, text);
  }
  CHECK(get(server.port, "/api/attend?input=still+here").first == 200);  // nothing above brought it down
  const auto [code, said] = server.stop(SIGTERM);
  CHECK(code == 0);
  CHECK(said.find("stopped (Terminated)") != std::string::npos);
  fs::remove_all(run);
}

TEST_CASE("viz serve: headless Chromium types an input and submits it, the maps change, a refused input shows why") {
  REQUIRE_MESSAGE(std::system("command -v chromium >/dev/null 2>&1") == 0,
                  "chromium is not installed: run sh cmake/install-deps.sh (Debian package chromium)");
  const fs::path run = tiny_lm_run("viz_serve", "browser");
  ServerProcess server(run);
  HeadlessChromium browser(run);
  const std::string url = fmt::format("http://127.0.0.1:{}/", server.port);
  browser.navigate(url + "#layer=0&head=1");
  REQUIRE(browser.wait_for("document.getElementById('status').dataset.cells > 0"));
  CHECK(browser.evaluate("location.hash").get<std::string>().find("head=1") != std::string::npos);
  const std::string before = browser.evaluate("document.querySelector('#focus canvas').toDataURL()");

  browser.evaluate("document.getElementById('input').focus()");
  browser.type("the cat sat");
  browser.evaluate("document.getElementById('submit').click()");
  REQUIRE(browser.wait_for("document.getElementById('ask-status').textContent === 'answers: 1'"));
  CHECK(browser.evaluate("document.getElementById('status').textContent") == "rendered 121 cells");  // 11 x 11
  CHECK(browser.evaluate("document.querySelector('#focus canvas').toDataURL()") != before);
  CHECK(browser.evaluate("document.getElementById('error').textContent") == "");
  CHECK(browser.evaluate("document.getElementById('prediction').textContent").get<std::string>().find("prediction: ") == 0);
  CHECK(browser.evaluate("document.querySelectorAll('#head-table tbody tr').length") == 2);
  // The view is in the URL: opening it again asks for the same input.
  const std::string hash = browser.evaluate("location.hash");
  CHECK(hash.find("input=the+cat+sat") != std::string::npos);
  CHECK(hash.find("head=1") != std::string::npos);

  browser.evaluate("document.getElementById('input').value = ''");
  browser.evaluate("document.getElementById('input').focus()");
  browser.type(std::string(20, 'e'));
  browser.evaluate("document.getElementById('submit').click()");
  REQUIRE(browser.wait_for("document.getElementById('error').textContent !== ''"));
  const std::string error = browser.evaluate("document.getElementById('error').textContent");
  CHECK(error.find("HTTP 413") != std::string::npos);
  CHECK(error.find("more than 16 tokens") != std::string::npos);
  CHECK(browser.evaluate("document.getElementById('status').textContent") == "rendered 121 cells");  // unchanged

  browser.navigate("about:blank");
  REQUIRE(browser.wait_for("location.href === 'about:blank'"));
  browser.navigate(url + hash);
  REQUIRE(browser.wait_for("document.getElementById('ask-status').textContent === 'answers: 1'"));
  CHECK(browser.evaluate("document.getElementById('status').textContent") == "rendered 121 cells");
  CHECK(browser.evaluate("document.getElementById('input').value") == "the cat sat");
  browser.stop();
  CHECK(server.stop(SIGINT).first == 0);
  fs::remove_all(run);
}

}  // namespace
