# Runtime image: the exporter with its runtime dependencies at the versions in constraints.txt,
# and the [k8s] extra (grpcio, protobuf) for the kubelet's pod-resources socket. Nothing else.
#
# Base: an exact Python patch release on an exact Debian release, not a moving "3.12-slim".
# For a bit-for-bit reproducible build also pin the digest, e.g.
#   docker build --build-arg PYTHON_IMAGE=python:3.12.12-slim-bookworm@sha256:<digest> .
# (`docker buildx imagetools inspect python:3.12.12-slim-bookworm` prints it).
ARG PYTHON_IMAGE=python:3.12.12-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY exporter ./exporter
# exporter/scenarios and exporter/docs link to these: the wheel carries copies of both.
COPY examples/scenarios ./examples/scenarios
COPY docs ./docs
RUN pip wheel --no-cache-dir --wheel-dir /wheels --constraint constraints.txt '.[k8s]'

FROM ${PYTHON_IMAGE}
COPY --from=build /wheels /wheels
COPY constraints.txt /tmp/constraints.txt
RUN pip install --no-cache-dir --no-index --find-links /wheels --constraint /tmp/constraints.txt \
        'gpushare-exporter[k8s]' \
    && rm -rf /wheels /tmp/constraints.txt \
    && useradd --system --uid 65532 --no-create-home exporter
# Privileges (docs/kubernetes.md, "Privileges"). The image's default user is unprivileged
# (uid 65532): enough for NVML on whole GPUs and for process names and pods (world-readable
# /proc/<pid>/cmdline and cgroup). Reading other users' /proc/<pid>/environ (MPS client limits,
# workload names from the environment) and NVML's per-MIG-instance process lists need root with
# CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH; the exporter logs one warning when it is denied.
# deploy/kubernetes/daemonset.yaml runs it that way; with Docker:
#   docker run --gpus all --pid host --user 0 --cap-drop ALL --cap-add SYS_PTRACE \
#     --cap-add DAC_READ_SEARCH -p 18474:18474 gpushare-exporter
USER 65532
EXPOSE 18474
ENV NVIDIA_DRIVER_CAPABILITIES=utility NVIDIA_VISIBLE_DEVICES=all PYTHONDONTWRITEBYTECODE=1
ENTRYPOINT ["exporter"]
CMD ["serve", "--listen", ":18474"]
