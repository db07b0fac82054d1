#include "launcher/etcd/http.h"

#include <cerrno>
#include <exception>

#include "launcher/etcd/gateway.h"
#include "launcher/seconds.h"

namespace launch::etcd {

using Clock = std::chrono::steady_clock;
using ms = std::chrono::milliseconds;
using Kind = EtcdError::Kind;

namespace {

std::string duration_text(ms d) { return seconds_text(double(d.count()) / 1000.0) + " s"; }

std::string size_text(size_t bytes) {
  if (bytes % (size_t(1) << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes % 1024 == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " bytes";
}

// curl_global_init is not thread-safe before curl 7.84: once, before the first handle.
void init_curl_once() {
  static const CURLcode rc = curl_global_init(CURL_GLOBAL_DEFAULT);
  if (rc != CURLE_OK) throw EtcdError(Kind::Connection, std::string("cannot initialise libcurl: ") + curl_easy_strerror(rc));
}

bool port_ok(std::string_view p) {
  if (p.empty() || p.size() > 5) return false;
  int v = 0;
  for (char c : p) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  return v >= 1 && v <= 65535;
}

}  // namespace

EtcdError make_error(const Options& opts, Kind kind, const std::string& what, const std::string& detail, int grpc_code) {
  const std::string at = "etcd at " + opts.endpoint;
  const std::string check = "; check " + opts.endpoint_source;
  switch (kind) {
    case Kind::Timeout:
      return EtcdError(kind, at + " did not answer " + what + " " + detail + check, grpc_code);
    case Kind::Connection:
      return EtcdError(kind, "cannot reach " + at + " (" + what + "): " + detail + check, grpc_code);
    case Kind::Server:
      return EtcdError(kind, at + " refused " + what + ": " + detail, grpc_code);
    case Kind::Protocol:
      return EtcdError(kind, at + " answered " + what + " with what is not etcd's v3 JSON gateway (" + detail +
                                 ")" + check + " (an etcd client URL, e.g. HOST:2379)", grpc_code);
    case Kind::TooLarge:
      return EtcdError(kind, at + " answered " + what + " with " + detail + check, grpc_code);
    case Kind::Cancelled:
      return EtcdError(kind, "interrupted while waiting for " + at + " (" + what + ")", grpc_code);
    case Kind::Invalid:
      if (!what.empty()) return EtcdError(kind, at + " (" + what + "): " + detail, grpc_code);
      break;
  }
  return EtcdError(Kind::Invalid, "etcd endpoint '" + opts.endpoint + "' " + detail + check, grpc_code);
}

std::string endpoint_url(const Options& opts) {
  std::string_view e = opts.endpoint;
  auto invalid = [&](const std::string& why) { return make_error(opts, Kind::Invalid, "", why); };
  if (e.rfind("https://", 0) == 0) throw invalid("uses TLS (https), which this client does not support yet");
  if (e.rfind("http://", 0) == 0) e.remove_prefix(7);
  if (!e.empty() && e.back() == '/') e.remove_suffix(1);
  if (e.find("://") != std::string_view::npos) throw invalid("has a scheme other than http://");
  for (char c : e)
    if (c == '/' || c == '@' || c == '?' || c == '#' || c <= ' ' || c == 0x7f)
      throw invalid("is not HOST:PORT (it holds '" + printable(std::string(1, c)) + "')");
  size_t colon = e.rfind(':');
  if (colon == std::string_view::npos || colon == 0) throw invalid("is not HOST:PORT (e.g. 127.0.0.1:2379)");
  std::string_view host = e.substr(0, colon);
  if (host.find(':') != std::string_view::npos && !(host.front() == '[' && host.back() == ']'))
    throw invalid("has an IPv6 address without brackets (write [ADDR]:PORT)");
  if (!port_ok(e.substr(colon + 1))) throw invalid("has no port number from 1 to 65535 (e.g. HOST:2379)");
  return "http://" + std::string(e);
}

// --- One transfer: what the write callback sees ---
struct Http::Transfer {
  size_t max_bytes = 0;
  size_t total = 0;
  std::string buf;  // the body, or (a stream) what has not formed a whole line yet
  const std::function<bool(std::string_view)>* on_line = nullptr;
  long status = 0;
  bool too_large = false;
  bool stopped = false;
  std::exception_ptr error;
  CURL* easy = nullptr;
};

namespace {

// libcurl hands the answer over piece by piece. Returning anything but n ends the transfer
// (CURLE_WRITE_ERROR): over the cap, a stream's reader done, or its reader threw.
size_t on_data(char* data, size_t, size_t n, void* user) {
  auto& t = *static_cast<Http::Transfer*>(user);
  if (n == 0) return 0;
  if (t.total + n > t.max_bytes) {
    t.too_large = true;
    return 0;
  }
  t.total += n;
  if (t.status == 0) curl_easy_getinfo(t.easy, CURLINFO_RESPONSE_CODE, &t.status);
  t.buf.append(data, n);
  if (!t.on_line || t.status != 200) return n;  // an error answer is read whole
  size_t start = 0;
  try {
    for (size_t nl; (nl = t.buf.find('\n', start)) != std::string::npos; start = nl + 1) {
      if (!(*t.on_line)(std::string_view(t.buf).substr(start, nl - start))) {
        t.stopped = true;
        return 0;
      }
    }
  } catch (...) {
    t.error = std::current_exception();
    return 0;
  }
  t.buf.erase(0, start);
  return n;
}

}  // namespace

Http::Http(const Options& opts, std::string base_url) : opts_(opts), base_url_(std::move(base_url)) {
  init_curl_once();
  easy_ = curl_easy_init();
  multi_ = curl_multi_init();
  headers_ = curl_slist_append(nullptr, "Content-Type: application/json");
  if (headers_) {
    // No "Expect: 100-continue" round trip for bodies over 1 KiB.
    curl_slist* h = curl_slist_append(headers_, "Expect:");
    if (h) headers_ = h;
  }
  if (!easy_ || !multi_ || !headers_) {
    release();
    throw EtcdError(Kind::Connection, "cannot make a libcurl handle (out of memory)");
  }
}

Http::~Http() { release(); }

void Http::release() {
  if (easy_) curl_easy_cleanup(easy_);
  if (multi_) curl_multi_cleanup(multi_);
  if (headers_) curl_slist_free_all(headers_);
  easy_ = nullptr;
  multi_ = nullptr;
  headers_ = nullptr;
}

void Http::perform(Transfer& t, const std::string& path, const std::string* body, ms timeout, const std::string& what) {
  char errbuf[CURL_ERROR_SIZE] = "";
  const std::string url = base_url_ + path;
  t.max_bytes = opts_.max_response_bytes;
  t.easy = easy_;
  curl_easy_setopt(easy_, CURLOPT_URL, url.c_str());
  curl_easy_setopt(easy_, CURLOPT_PROTOCOLS_STR, "http");
  curl_easy_setopt(easy_, CURLOPT_HTTP_VERSION, long(CURL_HTTP_VERSION_1_1));
  curl_easy_setopt(easy_, CURLOPT_NOSIGNAL, 1L);  // no SIGALRM for resolver timeouts: threads
  curl_easy_setopt(easy_, CURLOPT_HTTPHEADER, headers_);
  if (body) {
    curl_easy_setopt(easy_, CURLOPT_POST, 1L);
    curl_easy_setopt(easy_, CURLOPT_POSTFIELDS, body->data());
    curl_easy_setopt(easy_, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(body->size()));
  } else {
    curl_easy_setopt(easy_, CURLOPT_HTTPGET, 1L);
  }
  curl_easy_setopt(easy_, CURLOPT_TIMEOUT_MS, long(timeout.count() > 0 ? timeout.count() : 1));
  curl_easy_setopt(easy_, CURLOPT_CONNECTTIMEOUT_MS, long(timeout.count() > 0 ? timeout.count() : 1));
  // An announced length over the cap fails before a byte is read; on_data caps the rest.
  curl_easy_setopt(easy_, CURLOPT_MAXFILESIZE_LARGE, curl_off_t(t.max_bytes));
  curl_easy_setopt(easy_, CURLOPT_WRITEFUNCTION, on_data);
  curl_easy_setopt(easy_, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(easy_, CURLOPT_ERRORBUFFER, errbuf);

  curl_multi_add_handle(multi_, easy_);
  struct Detach {  // the handle leaves the multi however the call ends (an unfinished
    CURLM* m;      // transfer's connection is closed then, never reused)
    CURL* e;
    ~Detach() {
      curl_multi_remove_handle(m, e);
      curl_easy_setopt(e, CURLOPT_ERRORBUFFER, nullptr);
    }
  } detach{multi_, easy_};

  // libcurl enforces the timeout itself; this deadline only bounds our loop should it not.
  const auto deadline = Clock::now() + timeout + ms(1000);
  CURLcode result = CURLE_OK;
  for (;;) {
    int running = 0;
    CURLMcode mc = curl_multi_perform(multi_, &running);
    if (mc != CURLM_OK) throw make_error(opts_, Kind::Connection, what, curl_multi_strerror(mc));
    if (running == 0) {
      int left = 0;
      CURLMsg* msg = curl_multi_info_read(multi_, &left);
      result = msg && msg->msg == CURLMSG_DONE ? msg->data.result : CURLE_OK;
      break;
    }
    if (Clock::now() >= deadline) {
      result = CURLE_OPERATION_TIMEDOUT;
      break;
    }
    curl_waitfd extra{opts_.cancel_fd, CURL_WAIT_POLLIN, 0};
    const unsigned n_extra = opts_.cancel_fd >= 0 ? 1 : 0;
    auto left = std::chrono::duration_cast<ms>(deadline - Clock::now()).count();
    mc = curl_multi_poll(multi_, n_extra ? &extra : nullptr, n_extra, int(left > 0 ? left : 0), nullptr);
    if (mc != CURLM_OK) throw make_error(opts_, Kind::Connection, what, curl_multi_strerror(mc));
    if (n_extra && (extra.revents & CURL_WAIT_POLLIN) && opts_.cancelled && opts_.cancelled())
      throw make_error(opts_, Kind::Cancelled, what, "");
  }

  if (t.error) std::rethrow_exception(t.error);
  if (t.stopped) return;
  if (t.status == 0) curl_easy_getinfo(easy_, CURLINFO_RESPONSE_CODE, &t.status);
  const std::string detail = errbuf[0] ? errbuf : curl_easy_strerror(result);
  switch (result) {
    case CURLE_OK:
      break;
    case CURLE_WRITE_ERROR:
    case CURLE_FILESIZE_EXCEEDED:
      if (t.too_large || result == CURLE_FILESIZE_EXCEEDED)
        throw make_error(opts_, Kind::TooLarge, what, "more than " + size_text(t.max_bytes) + " (the client's limit)");
      throw make_error(opts_, Kind::Connection, what, detail);
    case CURLE_OPERATION_TIMEDOUT:
      throw make_error(opts_, Kind::Timeout, what, "within " + duration_text(timeout));
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_WEIRD_SERVER_REPLY:
    case CURLE_BAD_CONTENT_ENCODING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      throw make_error(opts_, Kind::Protocol, what, detail);
    default:
      throw make_error(opts_, Kind::Connection, what, detail);
  }
  if (t.status != 200) {
    if (auto st = parse_error(t.buf))
      throw make_error(opts_, Kind::Server, what, st->message + " (gRPC code " + std::to_string(st->code) + ")", st->code);
    throw make_error(opts_, Kind::Protocol, what, "HTTP " + std::to_string(t.status) + ": '" + printable(t.buf, 60) + "'");
  }
}

std::string Http::call(const std::string& path, const std::string* body, ms timeout, const std::string& what) {
  Transfer t;
  perform(t, path, body, timeout, what);
  return std::move(t.buf);
}

Http::StreamEnd Http::stream(const std::string& path, const std::string& body, ms timeout, const std::string& what,
                             const std::function<bool(std::string_view)>& on_line) {
  Transfer t;
  t.on_line = &on_line;
  try {
    perform(t, path, &body, timeout, what);
  } catch (const EtcdError& e) {
    // A stream that was answered (200) and then ran out of time is the caller's "nothing
    // happened"; one never answered is an error.
    if (e.kind() == Kind::Timeout && t.status == 200) return StreamEnd::TimedOut;
    throw;
  }
  if (t.stopped) return StreamEnd::Stopped;
  // The last line may lack its '\n'.
  if (!t.buf.empty() && !on_line(t.buf)) return StreamEnd::Stopped;
  return StreamEnd::Closed;
}

}  // namespace launch::etcd
