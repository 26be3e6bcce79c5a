"""Report rendering, bytes out: a template bundle (bundle.py) and its data (data.py) rendered by Jinja2 in
a bounded sandbox (jinja.py) and laid out by WeasyPrint with an asset-only URL fetcher (fetch.py), in
render.py. Knows nothing of jobs, the database or HTTP; imports only `core`."""
