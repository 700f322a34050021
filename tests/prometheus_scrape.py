#!/usr/bin/env python3
"""Scrapes a Prometheus endpoint and checks its text with prometheus_client's
parser (python3-prometheus-client) and the exposition format's line grammar.

Usage: prometheus_scrape.py URL [--token TOKEN] [--ca FILE]
Prints one JSON object {"name{label=value,...}": value} and exits 0; exits
1 with the reason when the scrape fails or the text does not parse (an HTTP
error prints "HTTP <code>").
"""
import argparse
import json
import re
import ssl
import sys
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABELS = r'(\{(' + NAME + r'="([^"\\]|\\.)*"(,' + NAME + r'="([^"\\]|\\.)*")*)?\})?'
VALUE = r"(NaN|[+-]?Inf|[+-]?[0-9.]+([eE][+-]?[0-9]+)?)"
SAMPLE = re.compile("^" + NAME + LABELS + " " + VALUE + "$")
COMMENT = re.compile("^# (HELP " + NAME + " .*|TYPE " + NAME +
                     " (counter|gauge|histogram|summary|untyped))$")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--token")
    parser.add_argument("--ca")
    args = parser.parse_args()
    request = urllib.request.Request(args.url)
    if args.token:
        request.add_header("Authorization", "Bearer " + args.token)
    context = ssl.create_default_context(cafile=args.ca) if args.ca else None
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as reply:
            content_type = reply.headers.get("Content-Type", "")
            text = reply.read().decode("utf-8")
    except urllib.error.HTTPError as e:
        print("HTTP %d" % e.code)
        return 1
    except Exception as e:  # connection refused, TLS failure
        print("error: %s" % e)
        return 1
    if not content_type.startswith("text/plain; version=0.0.4"):
        print("wrong content type: %s" % content_type)
        return 1
    for number, line in enumerate(text.splitlines(), 1):
        pattern = COMMENT if line.startswith("#") else SAMPLE
        if not pattern.match(line):
            print("line %d is not exposition format: %r" % (number, line))
            return 1
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join("%s=%s" % kv for kv in sorted(s.labels.items()))
            samples["%s{%s}" % (s.name, labels) if labels else s.name] = s.value
    print(json.dumps(samples, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
