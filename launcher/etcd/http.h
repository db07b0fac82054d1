// The client's transport: HTTP/1.1 requests to one etcd endpoint over libcurl (its multi
// interface, so that every wait also watches the cancel descriptor), each with a deadline and a
// cap on what its answer may hold. Turns every failure into EtcdError, with the endpoint and the
// call in the message. Not thread-safe; internal to the client.
#pragma once

#include <curl/curl.h>

#include <chrono>
#include <functional>
#include <string>
#include <string_view>

#include "launcher/etcd/client.h"

namespace launch::etcd {

// "etcd at HOST:PORT <...>" messages, one place for their wording. `what` names the call
// ("put '/a'"), `detail` says what happened.
EtcdError make_error(const Options& opts, EtcdError::Kind kind, const std::string& what, const std::string& detail,
                     int grpc_code = 0);

// "http://HOST:PORT" for an endpoint as Options takes it; EtcdError(Invalid) naming what is wrong.
std::string endpoint_url(const Options& opts);

class Http {
 public:
  Http(const Options& opts, std::string base_url);  // opts must outlive this
  ~Http();
  Http(const Http&) = delete;
  Http& operator=(const Http&) = delete;

  // The body of a 200 answer to GET (body null) or POST of `body` to base_url + path. Any other
  // status: EtcdError Server when it carries a gRPC status, else Protocol.
  std::string call(const std::string& path, const std::string* body, std::chrono::milliseconds timeout,
                   const std::string& what);

  enum class StreamEnd { Stopped, TimedOut, Closed };
  // POSTs `body` and hands every line of a 200 answer to on_line until it returns false
  // (Stopped), the timeout passes (TimedOut) or the server ends the answer (Closed). What
  // on_line throws ends the call and is rethrown. The connection is dropped after Stopped and
  // TimedOut. Errors as call().
  StreamEnd stream(const std::string& path, const std::string& body, std::chrono::milliseconds timeout,
                   const std::string& what, const std::function<bool(std::string_view)>& on_line);

 public:
  struct Transfer;  // what one request's write callback sees (http.cpp)

 private:
  void release();
  void perform(Transfer& t, const std::string& path, const std::string* body, std::chrono::milliseconds timeout,
               const std::string& what);

  const Options& opts_;
  std::string base_url_;
  CURL* easy_ = nullptr;
  CURLM* multi_ = nullptr;  // holds easy_ during a call; keeps the connection between calls
  curl_slist* headers_ = nullptr;
};

}  // namespace launch::etcd
