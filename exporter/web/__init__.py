"""Securing the HTTP endpoint: the exporter-toolkit web config (TLS, mTLS, basic auth,
response headers, rate limit), its hot reload, and the hardening of the HTTP server itself.

- :mod:`exporter.web.goyaml`: YAML read the way Go's yaml.v2 ``UnmarshalStrict`` reads it;
- :mod:`exporter.web.config`: the web config file, validated like ``promtool check web-config``;
- :mod:`exporter.web.tls`: the ssl.SSLContext it describes;
- :mod:`exporter.web.auth`: basic auth against bcrypt hashes;
- :mod:`exporter.web.live`: the config in force, reloaded on SIGHUP or a file change;
- :mod:`exporter.web.guard`: connection cap, read and idle timeouts, one-line warnings.
"""
