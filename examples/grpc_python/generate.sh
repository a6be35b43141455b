#!/usr/bin/env bash
# Generates the Python modules of proto/ for a gRPC client:
#   examples/grpc_python/generate.sh OUT_DIR [protoc|grpc_tools]
# protoc (default): protoc --python_out plus gRPC's Python plugin, as Debian
#   packages them (protobuf-compiler, protobuf-compiler-grpc); the code matches
#   Debian's python3-protobuf and python3-grpcio.
# grpc_tools: python3 -m grpc_tools.protoc (pip's grpcio-tools, or Debian's
#   python3-grpc-tools).
# OUT_DIR then holds gpubroker/v1/{broker,session}_pb2.py, broker_pb2_grpc.py
# and grpc_health/v1/health_pb2{,_grpc}.py: put it on sys.path.
# GPUBROKER_PROTO_DIR: where the .proto files are (default: this tree's proto/;
# an installed gpubroker has them in PREFIX/share/gpubroker/proto).
set -euo pipefail
out=${1:?usage: generate.sh OUT_DIR [protoc|grpc_tools]}
with=${2:-protoc}
proto=$(cd "${GPUBROKER_PROTO_DIR:-$(dirname "$0")/../../proto}" && pwd)
files=("$proto"/gpubroker/v1/broker.proto "$proto"/gpubroker/v1/session.proto
       "$proto"/grpc_health/v1/health.proto)
mkdir -p "$out"
case $with in
  protoc)
    protoc -I "$proto" --python_out="$out" --grpc_python_out="$out" \
      --plugin=protoc-gen-grpc_python="$(command -v grpc_python_plugin)" "${files[@]}" ;;
  grpc_tools)
    python=${PYTHON:-$( [ -x /usr/bin/python3 ] && echo /usr/bin/python3 || echo python3)}
    "$python" -m grpc_tools.protoc -I "$proto" --python_out="$out" \
      --grpc_python_out="$out" "${files[@]}" ;;
  *) echo "generate.sh: unknown generator '$with' (protoc or grpc_tools)" >&2; exit 2 ;;
esac
