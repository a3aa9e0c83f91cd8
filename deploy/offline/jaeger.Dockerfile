# jaegertracing/jaeger (Jaeger v2) built offline: the jaeger binary at the official
# image's path, listening on every interface. With no --config it runs the all-in-one:
# in-memory storage, OTLP gRPC 4317 and HTTP 4318, the query API and UI on 16686, health
# on 13133. Built from the module proxy, the UI is a placeholder page; the API is whole.
FROM scratch
COPY jaeger /cmd/jaeger/jaeger-linux
COPY tmp /tmp
ENV JAEGER_LISTEN_HOST=0.0.0.0
EXPOSE 4317 4318 5778 5779 9411 13133 14250 14268 16686
ENTRYPOINT ["/cmd/jaeger/jaeger-linux"]
USER 10001
