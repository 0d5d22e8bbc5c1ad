# Runtime image: the exporter and its four runtime dependencies, nothing else.
# The NVIDIA container toolkit mounts libnvidia-ml.so.1 into the container at run time
# (run with --gpus all, or NVIDIA_VISIBLE_DEVICES=all and the nvidia runtime); it is not baked in.
FROM python:3.12-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY exporter ./exporter
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.12-slim
RUN useradd --system --uid 65532 --no-create-home exporter
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
COPY examples/scenarios /usr/share/gpushare-exporter/scenarios
USER 65532
EXPOSE 18474
ENV NVIDIA_DRIVER_CAPABILITIES=utility NVIDIA_VISIBLE_DEVICES=all
ENTRYPOINT ["exporter"]
CMD ["serve", "--listen", "0.0.0.0:18474"]
