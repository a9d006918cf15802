"""The project's links, the one piece of metadata pyproject.toml cannot hold.

They are the addresses of the repository and the site this build belongs to, which only
the build knows: the Pages and release workflows set ``REPO_URL`` and ``SITE_URL`` (as
they do for the site itself). A local build links to the site ``make serve`` serves, and
names no repository rather than guess one. Everything else is in pyproject.toml.
"""

import os

from setuptools import setup

site = os.environ.get("SITE_URL") or "http://127.0.0.1:8000/"
site = site.rstrip("/") + "/"
urls = {"Documentation": site, "Changelog": f"{site}changelog/"}
if repo := os.environ.get("REPO_URL", "").rstrip("/"):
    urls |= {"Source": repo, "Issues": f"{repo}/issues"}

setup(project_urls=urls)
