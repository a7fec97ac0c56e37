"""The kubelet PodResources v1 API: `api.proto` from Kubernetes and the stubs `generate.sh` made from it.

Importing `api_pb2_grpc` needs the `trainmon[kubernetes]` extra (grpcio, protobuf); only the
`pod_resources` collector does, and only when `--kubelet-pod-resources-socket` is set.
"""
