"""Grafana dashboards as code (grafana-foundation-sdk): builders here, built JSON in
`dashboards/json/`, checked offline by `jobtrail dashboards check` and the tests."""
