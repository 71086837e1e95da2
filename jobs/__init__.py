"""Programs that run in pods on workload clusters, from the function's own image.

- :mod:`jobs.hydrate`: the ModelCacheHydration download Job (``python -m jobs.hydrate``).
- :mod:`jobs.flashload`: the flash loader init container (``python -m jobs.flashload``).
- :mod:`jobs.contract`: what the function and these programs agree on (commands,
  mount paths, markers, exit codes, environment, the result ConfigMap's keys).

Their dependencies (``huggingface_hub``, ``kubernetes``) are the ``jobs`` extra
(``pip install '.[jobs]'``); the server never imports them. Only :mod:`jobs.contract`,
plain constants, is imported by the function.
"""
