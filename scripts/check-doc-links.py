#!/usr/bin/env python3
"""Checks that every link of the facade's guide pages resolves in a docs build, and
that every link the facade's README (its crates.io page) makes to docs.rs names a page
and section that build has.

Usage: check-doc-links.py DOC_DIR README
DOC_DIR is cargo doc's output (target/doc); README the facade's README.md.
"""
import html.parser
import os
import re
import sys
import urllib.parse

DOCS_RS = "https://docs.rs/distlock/latest/"


class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids = set()
        self.links = []
        self.figures = 0

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("href"):
            self.links.append(attrs["href"])
        if tag == "img" and (attrs.get("src") or "").startswith("data:image/svg+xml;base64,"):
            self.figures += 1


pages = {}


def page(path):
    if path not in pages:
        parsed = Page()
        with open(path, encoding="utf-8") as f:
            parsed.feed(f.read())
        pages[path] = parsed
    return pages[path]


def resolves(path, fragment):
    """None when `path` (and `fragment` on it) is there, else why not."""
    if not os.path.isfile(path):
        return "no such page"
    if fragment and fragment not in page(path).ids:
        return f"no section #{fragment} on it"
    return None


def main(doc, readme):
    broken = []
    guides = os.path.join(doc, "distlock", "guides")
    checked = 0
    figures = 0
    names = sorted(os.listdir(guides)) if os.path.isdir(guides) else []
    shown = [os.path.join(guides, n, "index.html") for n in names if os.path.isdir(os.path.join(guides, n))]
    if len(shown) < 6:
        broken.append(f"{guides}: {len(shown)} guide pages, not 6")
    for source in shown + [os.path.join(guides, "index.html"), os.path.join(doc, "distlock", "index.html")]:
        figures += page(source).figures
        for href in page(source).links:
            parts = urllib.parse.urlsplit(href)
            if parts.scheme or href.startswith("//"):
                continue
            if re.fullmatch(r"\d+(-\d+)?", parts.fragment) and "/src/" in "/" + parts.path:
                # A line of the source view, which its script finds, not an id.
                continue
            target = os.path.normpath(os.path.join(os.path.dirname(source), urllib.parse.unquote(parts.path))) if parts.path else source
            why = resolves(target, parts.fragment)
            checked += 1
            if why:
                broken.append(f"{os.path.relpath(source, doc)}: {href}: {why}")
    with open(readme, encoding="utf-8") as f:
        text = f.read()
    for url in re.findall(r"\]\((https://docs\.rs/distlock/[^)\s]*)\)", text):
        checked += 1
        if not url.startswith(DOCS_RS):
            broken.append(f"{readme}: {url}: not a page of {DOCS_RS}")
            continue
        parts = urllib.parse.urlsplit(url[len(DOCS_RS):])
        why = resolves(os.path.join(doc, parts.path), parts.fragment)
        if why:
            broken.append(f"{readme}: {url}: {why}")
    if figures < 3:
        broken.append(f"the guides carry {figures} figures, not the benchmarks' 3")
    if broken:
        print("check-doc-links: links that do not resolve:", *broken, sep="\n  ", file=sys.stderr)
        return 1
    print(f"check-doc-links: {checked} links of {len(shown)} guide pages and the README resolve; {figures} figures carried in the pages")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
