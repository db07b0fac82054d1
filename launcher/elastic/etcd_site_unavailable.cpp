// make_etcd_site where launch was built without libcurl (the etcd client's HTTP): the etcd
// backend is refused at start-up, saying how to get it.
#include "launcher/elastic/site.h"
#include "launcher/errors.h"

namespace launch {

std::unique_ptr<ElasticSite> make_etcd_site(const Plan&, StopSignals&, ElasticSite::Clock::time_point,
                                            const std::string&, const std::string&) {
  throw UsageError("this launch was built without libcurl, so without its etcd client: --rdzv-backend etcd (and "
                   "--master etcd://) cannot be used; install libcurl4-openssl-dev (scripts/setup.sh) and rebuild, or "
                   "use launch's own store (--rdzv-backend c10d)");
}

}  // namespace launch
