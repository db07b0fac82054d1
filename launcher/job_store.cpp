#include "launcher/job_store.h"

#include <stdexcept>

#ifdef LAUNCH_HAVE_STORE
#include "launcher/store/store_server.h"
#include "proto/token.h"
#else
#include <cstdio>

#include "launcher/store/kv_command.h"
#endif

namespace launch {

#ifdef LAUNCH_HAVE_STORE

std::optional<JobStore> start_job_store(const std::string& host, const std::string& job_id,
                                        uint16_t port) {
  StoreServerConfig cfg;
  cfg.host = host;
  cfg.port = port;
  cfg.job_id = job_id;
  cfg.token = proto::generate_token();
  std::shared_ptr<StoreServer> server;
  try {
    server = StoreServer::start(cfg);
  } catch (const std::runtime_error&) {
    // An unrelated program took the port in the moment since we let it go: any free one will do.
    if (port == 0) throw;
    cfg.port = 0;
    server = StoreServer::start(cfg);
  }
  JobStore js;
  js.address = server->address();
  js.token = cfg.token;
  js.report_failure = [s = server.get()](int rank, const std::string& what) { s->report_failure(rank, what); };
  js.server = server;
  return js;
}

std::optional<JobStore> start_shared_job_store(const std::string& host, const std::string& job_id,
                                               uint16_t port, const std::string& token) {
  StoreServerConfig cfg;
  cfg.host = host;
  cfg.port = port;
  cfg.job_id = job_id;
  cfg.token = token;
  std::shared_ptr<StoreServer> server = StoreServer::start(cfg);
  JobStore js;
  js.address = server->address();
  js.token = token;
  js.report_failure = [s = server.get()](int rank, const std::string& what) { s->report_failure(rank, what); };
  js.server = server;
  return js;
}

#else  // built before launcher/store existed: no store, and `launch kv` says so

std::optional<JobStore> start_shared_job_store(const std::string&, const std::string&, uint16_t,
                                               const std::string&) {
  return std::nullopt;
}

std::optional<JobStore> start_job_store(const std::string&, const std::string&, uint16_t) {
  return std::nullopt;
}

int run_kv_command(int, char**) {
  std::fprintf(stderr, "launch kv: error: this launch was built without the store\n");
  return 2;
}

#endif

}  // namespace launch
