// `pagellm serve` start-up from the command line: a model path that is not a regular file is
// refused at once (a FIFO used to block open() forever, with SIGTERM blocked), and SIGINT /
// SIGTERM during a long model load end the process promptly.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "format/gguf.h"
#include "format/gguf_writer.h"

namespace {

using Clock = std::chrono::steady_clock;

// A child process running build/pagellm with its stderr on a pipe.
class Child {
 public:
  explicit Child(std::vector<std::string> args) {
    int fds[2];
    if (pipe(fds) != 0) std::abort();
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], 2);
      close(fds[0]);
      close(fds[1]);
      args.insert(args.begin(), PAGELLM_BINARY);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(fds[1]);
    err_ = fds[0];
  }
  ~Child() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    close(err_);
  }
  pid_t pid() const { return pid_; }
  const std::string& err() const { return log_; }

  // Reads stderr until it contains `text` (true) or timeout_s passes / the pipe closes (false).
  bool read_until(const std::string& text, double timeout_s) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
    while (log_.find(text) == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return false;
      pollfd p{err_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
      char buf[4096];
      const ssize_t n = read(err_, buf, sizeof buf);
      if (n <= 0) return log_.find(text) != std::string::npos;
      log_.append(buf, static_cast<size_t>(n));
    }
    return true;
  }
  // The exit code (128 + signal when killed by one), or -1 after timeout_s (then killed).
  int wait_exit(double timeout_s) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (Clock::now() > deadline) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    pid_ = -1;
    read_until("\x01", 1);  // the rest of stderr (the pipe is closed now)
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  pid_t pid_ = -1;
  int err_ = -1;
  std::string log_;
};

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "/serve_cli_" + std::to_string(getpid()) + "_" + name;
}

// The bundled model with metadata `key` set to `value`, written to `path`.
void write_model_with(const std::string& path, const std::string& key, const pagellm::GgufValue& value) {
  auto src = pagellm::GgufFile::open(std::string(PAGELLM_SOURCE_DIR) + "/models/stories260K-f32.gguf");
  pagellm::GgufWriter w;
  for (const auto& [k, v] : src->metadata()) {
    if (k != "general.alignment" && k != key) w.set(k, v);
  }
  w.set(key, value);
  for (const pagellm::GgufTensorInfo& t : src->tensors()) {
    w.add_tensor(t.name, t.type, t.ne, std::vector<uint8_t>(t.data, t.data + t.size_bytes));
  }
  w.write(path);
}

TEST(ServeCli, FifoModelIsRefusedAtOnceNamingIt) {
  const std::string fifo = temp_path("model.gguf");
  std::filesystem::remove(fifo);
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  Child c({"serve", "-m", fifo, "--port", "0", "--threads", "1"});
  const int code = c.wait_exit(10);
  if (code == -1) {  // it blocks in open(): let it through, so that the test ends
    const int w = open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (w >= 0) close(w);
  }
  EXPECT_EQ(code, 1) << c.err();
  EXPECT_NE(c.err().find("'" + fifo + "'"), std::string::npos) << c.err();
  EXPECT_NE(c.err().find("FIFO"), std::string::npos) << c.err();
  std::filesystem::remove(fifo);
}

// A directory is read as a Hugging Face model directory (format/hf_dir.h): an empty one is
// refused naming it and the first file it lacks.
TEST(ServeCli, DirectoryModelIsRefusedNamingIt) {
  const std::string dir = temp_path("dir.gguf");
  std::filesystem::create_directories(dir);
  Child c({"serve", "-m", dir, "--port", "0", "--threads", "1"});
  EXPECT_EQ(c.wait_exit(10), 1) << c.err();
  EXPECT_NE(c.err().find("Hugging Face directory '" + dir + "' has no config.json"), std::string::npos) << c.err();
  std::filesystem::remove(dir);
}

// The bundled model with general.sampling.temp = -1 (what a converter could write): serving it
// with the model's sampling defaults (--generation-config auto) is refused naming the key; with
// --generation-config vllm it serves on the OpenAI defaults.
TEST(ServeCli, BadModelSamplingDefaultsAreRefusedUnlessIgnored) {
  const std::string path = temp_path("bad-sampling.gguf");
  write_model_with(path, "general.sampling.temp", pagellm::GgufValue::f32(-1.0f));
  {
    Child c({"serve", "-m", path, "--port", "0", "--threads", "1"});
    EXPECT_EQ(c.wait_exit(30), 1) << c.err();
    EXPECT_NE(c.err().find("general.sampling.temp"), std::string::npos) << c.err();
    EXPECT_NE(c.err().find("--generation-config vllm"), std::string::npos) << c.err();
  }
  {
    Child c({"serve", "-m", path, "--port", "0", "--threads", "1", "--generation-config", "vllm"});
    EXPECT_TRUE(c.read_until("serving model", 30)) << c.err();
    kill(c.pid(), SIGTERM);
    EXPECT_EQ(c.wait_exit(30), 0) << c.err();
  }
  std::filesystem::remove(path);
}

// What loading reads past (llama.cpp ignores such a BOS id too) is logged at start-up, and the
// model is served.
TEST(ServeCli, LogsTheTokenizersLoadWarnings) {
  const std::string path = temp_path("read-past.gguf");
  // A BOS id outside the vocabulary; a chat template that is not a string (ignored: chat requests
  // get the fallback template).
  const std::pair<std::string, pagellm::GgufValue> cases[] = {
      {"tokenizer.ggml.bos_token_id", pagellm::GgufValue::u32(70000)},
      {"tokenizer.chat_template", pagellm::GgufValue::u32(5)}};
  const char* logged[] = {"warning: tokenizer.ggml.bos_token_id = 70000 is outside the vocabulary",
                          "warning: tokenizer.chat_template is a uint32, not a string; ignored"};
  for (int i = 0; i < 2; ++i) {
    write_model_with(path, cases[i].first, cases[i].second);
    Child c({"serve", "-m", path, "--port", "0", "--threads", "1"});
    EXPECT_TRUE(c.read_until(logged[i], 30)) << c.err();
    EXPECT_TRUE(c.read_until("serving model", 30)) << c.err();
    kill(c.pid(), SIGTERM);
    EXPECT_EQ(c.wait_exit(30), 0) << c.err();
  }
  std::filesystem::remove(path);
}

// serve's budget is auto by default; --target-itl-ms T serves with a step-time budget of 0.9 T;
// it and --max-step-ms exclude each other, and a negative or non-numeric budget is refused naming
// the flag.
TEST(ServeCli, StepTimeBudgetFlags) {
  {
    Child c({"serve", "--port", "0", "--threads", "1"});
    EXPECT_TRUE(c.read_until("step-time budget: auto", 30)) << c.err();
    kill(c.pid(), SIGTERM);
    EXPECT_EQ(c.wait_exit(30), 0) << c.err();
  }
  {
    Child c({"serve", "--port", "0", "--threads", "1", "--max-step-ms", "0"});
    EXPECT_TRUE(c.read_until("step-time budget: none", 30)) << c.err();
    kill(c.pid(), SIGTERM);
    EXPECT_EQ(c.wait_exit(30), 0) << c.err();
  }
  {
    Child c({"serve", "--port", "0", "--threads", "1", "--max-step-ms", "fast"});
    EXPECT_NE(c.wait_exit(30), 0) << c.err();
    EXPECT_NE(c.err().find("--max-step-ms must be auto or in [0, 3600000] milliseconds, got 'fast'"), std::string::npos)
        << c.err();
  }
  {
    Child c({"serve", "--port", "0", "--threads", "1", "--target-itl-ms", "100"});
    EXPECT_TRUE(c.read_until("step-time budget: 90 ms", 30)) << c.err();
    kill(c.pid(), SIGTERM);
    EXPECT_EQ(c.wait_exit(30), 0) << c.err();
  }
  {
    Child c({"serve", "--port", "0", "--threads", "1", "--target-itl-ms", "100", "--max-step-ms", "50"});
    EXPECT_NE(c.wait_exit(30), 0) << c.err();
    EXPECT_NE(c.err().find("excludes"), std::string::npos) << c.err();
  }
  {  // a factor that would be silently ignored is refused
    Child c({"serve", "--port", "0", "--threads", "1", "--max-step-ms", "10", "--auto-step-factor", "3"});
    EXPECT_NE(c.wait_exit(30), 0) << c.err();
    EXPECT_NE(c.err().find("--auto-step-factor applies only with --max-step-ms auto"), std::string::npos) << c.err();
  }
  {
    Child c({"serve", "--port", "0", "--threads", "1", "--auto-step-factor", "3"});
    EXPECT_TRUE(c.read_until("step-time budget: auto (3 x", 30)) << c.err();
    kill(c.pid(), SIGTERM);
    EXPECT_EQ(c.wait_exit(30), 0) << c.err();
  }
  {
    Child c({"serve", "--port", "0", "--threads", "1", "--max-step-ms", "-5"});
    EXPECT_NE(c.wait_exit(30), 0) << c.err();
    EXPECT_NE(c.err().find("--max-step-ms must be auto or in [0, 3600000] milliseconds"), std::string::npos) << c.err();
  }
}

// A model that takes seconds to load: tinyllama-1.1b's shape in q4_0 (~640 MB, random weights,
// the llama SPM vocabulary), written once per test binary run. "" when it cannot be made.
const std::string& slow_model() {
  static const std::string path = [] {
    const std::string out = temp_path("tinyllama-q4_0.gguf");
    const std::string cmd = std::string(PAGELLM_BINARY) + " make-model --shape tinyllama-1.1b --dtype q4_0 --seed 1" +
                            " --vocab " + PAGELLM_TESTDATA_DIR + "/vocab/ggml-vocab-llama-spm.gguf -o " + out +
                            " > /dev/null 2>&1";
    return std::system(cmd.c_str()) == 0 ? out : std::string();
  }();
  return path;
}

// SIGTERM / SIGINT while the model loads: exit at once with 128 + signal and a log line (they
// used to be blocked until the load was done, then the server started and drained).
TEST(ServeCli, SignalDuringModelLoadExitsPromptly) {
  ASSERT_FALSE(slow_model().empty()) << "make-model could not write the test model";
  for (const int sig : {SIGTERM, SIGINT}) {
    SCOPED_TRACE(sig == SIGTERM ? "SIGTERM" : "SIGINT");
    Child c({"serve", "-m", slow_model(), "--port", "0", "--threads", "1"});
    ASSERT_TRUE(c.read_until("loading model '" + slow_model() + "'", 30)) << c.err();
    // The load ends with the KV cache line; the signal must come before it to test anything.
    ASSERT_EQ(c.err().find("KV cache:"), std::string::npos) << "the model loaded too fast: " << c.err();
    kill(c.pid(), sig);
    const auto t0 = Clock::now();
    const int code = c.wait_exit(20);
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    EXPECT_EQ(code, 128 + sig) << c.err();
    EXPECT_LT(seconds, 3.0);
    EXPECT_NE(c.err().find(std::string("received ") + (sig == SIGTERM ? "SIGTERM" : "SIGINT") +
                           " while loading the model: exiting"),
              std::string::npos)
        << c.err();
    EXPECT_EQ(c.err().find(" on http://"), std::string::npos) << c.err();
  }
  std::filesystem::remove(slow_model());
}

}  // namespace
