#include "launcher/store/job_store.h"

#include <stdexcept>

#include "store/store_server.h"
#include "proto/token.h"

namespace launch {

JobStore start_job_store(const std::string& host, const std::string& job_id, uint16_t port) {
  store::StoreServerConfig cfg;
  cfg.host = host;
  cfg.port = port;
  cfg.job_id = job_id;
  cfg.token = proto::generate_token();
  std::shared_ptr<store::StoreServer> server;
  try {
    server = store::StoreServer::start(cfg);
  } catch (const std::runtime_error&) {
    // An unrelated program took the port in the moment since we let it go: any free one will do.
    if (port == 0) throw;
    cfg.port = 0;
    server = store::StoreServer::start(cfg);
  }
  JobStore js;
  js.address = server->address();
  js.token = cfg.token;
  js.report_failure = [s = server.get()](int rank, const std::string& what) { s->report_failure(rank, what); };
  js.server = server;
  return js;
}

JobStore start_shared_job_store(const std::string& host, const std::string& job_id, uint16_t port,
                                const std::string& token,
                                std::function<void(const std::string& client_name, bool open)> on_client) {
  store::StoreServerConfig cfg;
  cfg.host = host;
  cfg.port = port;
  cfg.job_id = job_id;
  cfg.token = token;
  cfg.on_client = std::move(on_client);
  std::shared_ptr<store::StoreServer> server = store::StoreServer::start(cfg);
  JobStore js;
  js.address = server->address();
  js.token = token;
  js.report_failure = [s = server.get()](int rank, const std::string& what) { s->report_failure(rank, what); };
  js.server = server;
  return js;
}


}  // namespace launch
