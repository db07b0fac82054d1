#!/bin/sh
# The job's store token, as a Kubernetes Secret the manifests here read into LAUNCH_STORE_TOKEN
# (a multi-node launch refuses to open its store to the network without one). Once per
# namespace; every pod of a job must see the same token.
set -eu
kubectl create secret generic launch-token \
  --from-literal=token="$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')" "$@"
