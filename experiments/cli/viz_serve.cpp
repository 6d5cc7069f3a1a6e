// `attnlab viz RUN_DIR --serve` (heads_commands.hpp, docs/cli.md): the viz page over HTTP, where
// the student's own input goes through the engine.
//
//   GET /                      the page (viz_page.html with the run's validation examples and a
//                              "serve" section that turns on its input form)
//   GET /api/attend?input=T    the maps of every layer and head, the axis labels, a note naming
//   GET /api/attend?example=I  the example and the model's prediction on T (or on validation
//                              example I) as JSON; a bad request gets 4xx and {"error": message}
//                              (viz_request.hpp)
//
// VizService (viz_parts.hpp) answers both without sockets; run_viz_serve puts it behind
// cpp-httplib (Debian's libcpp-httplib-dev, found by CMake; without it --serve is an error).
// The server binds 127.0.0.1 unless --host says otherwise, runs the model for one request at a
// time (a mutex), and stops on SIGINT or SIGTERM: their handler only writes to a pipe, and a
// watcher thread reading it stops the server, which then returns from listening.
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "autograd/ops.hpp"
#include "experiments/cli/commands.hpp"
#include "experiments/cli/viz_parts.hpp"
#include "experiments/cli/viz_request.hpp"
#include "tensor/creation.hpp"

#ifdef ATTNLAB_WITH_HTTPLIB
#include <httplib.h>
#endif

namespace attnlab::cli {
namespace viz_detail {

using nlohmann::json;

namespace {

// The k most probable of `logits` (C values) as [{"label", "p"}], most probable first.
json top_labels(const runner::TaskData& task, const double* logits, int64_t C, int64_t k) {
  std::vector<double> p(logits, logits + C);
  const double max = *std::max_element(p.begin(), p.end());
  double total = 0;
  for (double& v : p) total += v = std::exp(v - max);
  std::vector<int64_t> order(size_t(C), 0);
  for (int64_t c = 0; c < C; ++c) order[size_t(c)] = c;
  k = std::min(k, C);
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int64_t a, int64_t b) { return p[size_t(a)] > p[size_t(b)]; });
  json out = json::array();
  for (int64_t i = 0; i < k; ++i)
    out.push_back({{"label", task.label(order[size_t(i)])}, {"p", p[size_t(order[size_t(i)])] / total}});
  return out;
}

// What the model predicts: a classifier's class (logits (1, C)), or at every shown position the
// most probable next token / per-position output (logits (1, N, C)) with the top 5 at the last.
json prediction_json(const runner::TaskData& task, const Tensor& logits, const Axis& axis, std::optional<int64_t> target) {
  const std::vector<double> v = to(logits, kFloat64).to_vector<double>();
  const int64_t C = logits.size(-1);
  auto text_of = [](const json& top) {
    std::string s;
    for (const json& t : top) s += fmt::format("{}{} {:.3f}", s.empty() ? "" : ", ", t["label"].get<std::string>(), t["p"].get<double>());
    return s;
  };
  if (logits.dim() == 2) {  // (1, C)
    const json top = top_labels(task, v.data(), C, 5);
    return {{"kind", "class"},
            {"top", top},
            {"text", fmt::format("predicted {} (p {:.3f}){}; top: {}", top[0]["label"].get<std::string>(),
                                 top[0]["p"].get<double>(), target ? "; label " + task.label(*target) : "", text_of(top))}};
  }
  json positions = json::array();  // (1, N, C): one guess per shown position
  for (int64_t q : axis.keep) positions.push_back(top_labels(task, v.data() + q * C, C, 1)[0]);
  const json last = top_labels(task, v.data() + axis.keep.back() * C, C, 5);
  return {{"kind", task.language_model ? "next_token" : "per_position"},
          {"positions", positions},
          {"top", last},
          {"text", fmt::format("{} after the last position: {}", task.language_model ? "next token" : "output",
                               text_of(last))}};
}

// JSON text of a reply. Strings from a request (a path, a message quoting it) may hold any
// bytes: invalid UTF-8 becomes U+FFFD instead of an exception.
std::string text_of(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }
std::string error_json(const std::string& message) { return text_of({{"error", message}}); }

}  // namespace

VizService::VizService(const VizOptions& o) {
  if (o.max_tokens < 2 || o.max_tokens > 256) fail<ValueError>("--max-tokens must be in [2, 256], got {}", o.max_tokens);
  if (!o.other.empty())
    fail<ValueError>("--serve shows one run; {} is a second run directory (compare two runs with the static page, "
                     "without --serve)", o.other.string());
  runs_.push_back(load_page_run(o.run_dir));
  const runner::TaskData& task = runs_[0].run.task;
  max_tokens_ = std::min(o.max_tokens, task.seq_len);
  // A token task's display texts run up to a few bytes ("[MAX", "k12"), UTF-8 up to 4.
  max_input_bytes_ = size_t(max_tokens_) * 8 + 64;
  const json examples = collect_examples(o, runs_);
  json data = page_data(examples, runs_);

  const bool text = task.language_model && !task.token_bytes.empty();
  const bool tokens = !text && task.vocab_size > 0 && !task.tokens.empty();
  json editable = json::array();  // the classifiers' validation examples as text to edit
  if (!task.language_model) {
    const int64_t scan = std::min<int64_t>(validation_size(runs_[0].run), 200);
    int64_t index = 0;
    for_each_validation_batch(runs_[0].run, scan, 1, [&](const data::Batch& b) {
      const int64_t i = index++;
      if (editable.size() >= 24) return;
      std::vector<int64_t> ids;
      if (tokens) ids = b.inputs.to_vector<int64_t>();
      int64_t real = b.inputs.size(1);
      if (task.pad_id >= 0 && tokens) real = int64_t(std::count_if(ids.begin(), ids.end(), [&](int64_t t) { return t != task.pad_id; }));
      if (real > max_tokens_) return;
      editable.push_back({{"index", i},
                          {"text", tokens ? input_text(task, ids) : std::string()},
                          {"note", fmt::format("validation example {}: label {}", i, task.label(b.targets.item<int64_t>()))}});
    });
  }
  data["serve"] = {{"api", "api/attend"},
                   {"run", o.run_dir.filename().empty() ? o.run_dir.parent_path().filename().string()
                                                         : o.run_dir.filename().string()},
                   {"mode", text ? "text" : tokens ? "tokens" : "examples"},
                   {"max_tokens", max_tokens_},
                   {"max_bytes", max_input_bytes_},
                   {"examples", editable}};
  page_ = page_of(data);
}

json VizService::example_json(const data::Batch& batch, const std::string& input, std::optional<int64_t> target) {
  PageRun& r = runs_[0];
  std::pair<Tensor, std::vector<Tensor>> captured;
  {
    std::lock_guard<std::mutex> lock(model_mutex_);
    captured = analysis::capture_attention(r.probe, batch);
  }
  const auto& [logits, maps] = captured;
  const Axis axis = example_axis(r.run, r.probe, batch, maps[0].size(2));
  std::vector<int64_t> layers;
  for (const Tensor& m : maps) layers.push_back(m.size(1));  // (1, h, N, N)
  const json prediction = prediction_json(r.run.task, logits, axis, target);
  return {{"input", input},
          {"tokens", axis.labels},
          {"prediction", prediction},
          {"layers", layers},
          {"maps", maps_json(maps, axis.keep)}};
}

VizService::Reply VizService::attend(std::string_view query) {
  try {
    const AttendQuery q = parse_attend_query(query, max_input_bytes_);
    const runner::TaskData& task = runs_[0].run.task;
    const models::LoadedRun& run = runs_[0].run;
    if (q.example) {
      const int64_t n = validation_size(run);
      if (*q.example >= n)
        throw RequestError(404, fmt::format("example {} does not exist: the validation split has {} (0..{})", *q.example,
                                            n, n - 1));
      json out;
      // The one batch of example I: the first I + 1 examples' last.
      for_each_validation_batch(run, *q.example + 1, *q.example + 1, [&](const data::Batch& all) {
        data::Batch b{narrow(all.inputs, 0, *q.example, 1), narrow(all.targets, 0, *q.example, 1)};
        if (task.language_model) {
          b = {narrow(b.inputs, 1, 0, max_tokens_), narrow(b.targets, 1, 0, max_tokens_)};  // (1, T)
        } else if (b.inputs.dim() == 2) {
          std::vector<int64_t> ids = b.inputs.to_vector<int64_t>();
          const auto real = std::count_if(ids.begin(), ids.end(), [&](int64_t t) { return t != task.pad_id; });
          if (real > max_tokens_)
            throw RequestError(413, fmt::format("example {} has {} tokens, more than the limit of {} (--max-tokens)",
                                                *q.example, real, max_tokens_));
        }
        const bool tokens = b.inputs.dim() == 2;
        out = example_json(b, tokens ? input_text(task, b.inputs.to_vector<int64_t>()) : "",
                           task.language_model || task.per_position ? std::nullopt
                                                                    : std::optional<int64_t>(b.targets.item<int64_t>()));
        out["note"] = task.language_model || task.per_position
                          ? fmt::format("validation example {}", *q.example)
                          : fmt::format("validation example {}: label {}", *q.example, task.label(b.targets.item<int64_t>()));
      });
      return {200, text_of(out)};
    }
    std::vector<int64_t> ids = encode_input(task, *q.input, max_tokens_);
    const int64_t n = int64_t(ids.size());
    // A padded task (ListOps) sees its usual length: the input, then padding (not shown).
    if (task.pad_id >= 0 && !task.language_model) ids.resize(size_t(std::max(n, task.seq_len)), task.pad_id);
    const int64_t N = int64_t(ids.size());
    data::Batch b{from_vector(ids, {1, N}),  // (1, N)
                  task.language_model || task.per_position ? zeros({1, N}, kInt64) : zeros({1}, kInt64)};
    json out = example_json(b, *q.input, std::nullopt);
    out["note"] = "your input";
    return {200, text_of(out)};
  } catch (const RequestError& e) {
    return {e.status, error_json(e.what())};
  } catch (const std::exception& e) {
    return {500, error_json(fmt::format("the model failed on this input: {}", e.what()))};
  }
}

}  // namespace viz_detail

#ifdef ATTNLAB_WITH_HTTPLIB
namespace {

// The stop pipe of the running server: on_stop_signal writes the signal's number into [1].
int g_stop_pipe[2] = {-1, -1};
extern "C" void on_stop_signal(int signal) {
  const auto byte = static_cast<unsigned char>(signal);
  [[maybe_unused]] const ssize_t n = write(g_stop_pipe[1], &byte, 1);
}

// The query of a request target: what follows the first '?' ("" when none).
std::string_view query_of(const std::string& target) {
  const size_t q = target.find('?');
  return q == std::string::npos ? std::string_view() : std::string_view(target).substr(q + 1);
}

int serve(const VizOptions& o, std::ostream& out) {
  viz_detail::VizService service(o);
  httplib::Server server;
  server.set_payload_max_length(64 * 1024);  // GET only: a body is never needed
  server.set_read_timeout(10);
  server.set_write_timeout(10);
  server.Get("/", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(service.page(), "text/html; charset=utf-8");
  });
  server.Get("/api/attend", [&](const httplib::Request& req, httplib::Response& res) {
    const auto reply = service.attend(query_of(req.target));
    res.status = reply.status;
    res.set_content(reply.body, "application/json");
  });
  // Any other failure (no such path, bad method, a request line httplib refuses): JSON naming it.
  server.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    const std::string what = res.status == 404 ? "no such page" : fmt::format("HTTP status {}", res.status);
    res.set_content(viz_detail::error_json(fmt::format("{}: {} {}; this server answers GET / and GET /api/attend?input=TEXT",
                                                       what, req.method, req.path.substr(0, 200))),
                    "application/json");
    return httplib::Server::HandlerResponse::Handled;
  }));
  server.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr e) {
    std::string message = "unknown error";
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      message = x.what();
    } catch (...) {
    }
    res.status = 500;
    res.set_content(viz_detail::error_json(message), "application/json");
  });

  // SIGINT and SIGTERM: a handler (any thread may run it) writes the signal's number to a pipe,
  // the async-signal-safe way out; a watcher thread reads it and stops the server.
  if (pipe2(g_stop_pipe, O_CLOEXEC | O_NONBLOCK) != 0) fail<ValueError>("--serve: pipe2 failed: {}", std::strerror(errno));
  struct sigaction on_stop{}, old_int{}, old_term{};
  on_stop.sa_handler = on_stop_signal;
  sigemptyset(&on_stop.sa_mask);
  sigaction(SIGINT, &on_stop, &old_int);
  sigaction(SIGTERM, &on_stop, &old_term);
  struct Restore {
    struct sigaction *old_int, *old_term;
    ~Restore() {
      sigaction(SIGINT, old_int, nullptr);
      sigaction(SIGTERM, old_term, nullptr);
      close(g_stop_pipe[0]);
      close(g_stop_pipe[1]);
    }
  } restore{&old_int, &old_term};

  const int port = o.port == 0 ? server.bind_to_any_port(o.host) : (server.bind_to_port(o.host, o.port) ? o.port : -1);
  if (port <= 0)
    fail<ValueError>("--host {} --port {}: cannot listen there (the port is taken, or the address is not this "
                     "machine's); pick another --port, or --port 0 for any free one", o.host, o.port);
  std::atomic<bool> done{false};
  std::atomic<int> caught{0};
  std::thread watcher([&] {
    while (!done) {
      pollfd p{g_stop_pipe[0], POLLIN, 0};
      unsigned char signal = 0;
      if (poll(&p, 1, 100) > 0 && read(g_stop_pipe[0], &signal, 1) == 1) caught = signal;
      if (caught) server.stop();  // again on every tick: a signal may come before listening starts
    }
  });
  out << fmt::format("serving http://{}:{}/ : run {}, {} tokens at most per input; Ctrl-C stops\n", o.host, port,
                     o.run_dir.string(), service.max_tokens())
      << std::flush;
  if (o.host != "127.0.0.1" && o.host != "localhost" && o.host != "::1")
    out << fmt::format("note: --host {} lets other machines reach this server\n", o.host) << std::flush;
  const bool ok = server.listen_after_bind();
  done = true;
  watcher.join();
  if (!caught && !ok) fail<ValueError>("the server on {}:{} stopped with an error", o.host, port);
  out << fmt::format("stopped ({})\n", caught ? strsignal(caught) : "server closed") << std::flush;
  return 0;
}

}  // namespace
#endif

int run_viz_serve(const VizOptions& o, std::ostream& out, std::ostream& err) {
  try {
#ifdef ATTNLAB_WITH_HTTPLIB
    return serve(o, out);
#else
    fail<ValueError>("--serve: this attnlab was built without cpp-httplib; install Debian's libcpp-httplib-dev "
                     "(sh cmake/install-deps.sh) and configure the build again");
#endif
  } catch (...) {
    return exit_status(nullptr, "viz", {o.run_dir.string()}, out, err);
  }
}

}  // namespace attnlab::cli
