# A Dockerfile with one mistake of each kind tests/manifests/check_dockerfile.py finds.
# expect: :6: RUN before the first FROM
# expect: :7: FROM [--platform=P] IMAGE [AS NAME]
# expect: :8: unknown instruction COPPY
# expect: :9: an architecture literal
RUN true
FROM debian:12 AS build AS again
COPPY . .
COPY no-such-dir/tierfs_0.1.0_amd64.deb /tmp/
# expect: :9: COPY no-such-dir/tierfs_0.1.0_amd64.deb: not in the build context
# expect: :16: RUN: sh -n
# expect: :18: COPY --from=bulid: no earlier stage
# expect: :19: CMD: the JSON form is not an array of strings
# expect: :20: COPY tools/s3rver: excluded by
FROM debian:12-slim
RUN if true; then echo; \
    fi fi
COPY --from=bulid /out/ /tmp/
CMD ["tierfs", 1]
COPY tools/s3rver /opt/
