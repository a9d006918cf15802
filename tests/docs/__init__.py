"""Tests of the documentation site: its sources, its build and the pages readers get."""
