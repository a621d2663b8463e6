"""Ray clusters across nodes for multi-node AgentJet training: ``ray_cluster`` start / status / stop.

A cluster is an experiment run (``launch_experiment``'s machinery): one ``ray start --block`` process
per node in tmux, so Ray's daemons inherit the run marker and get its logs, max time and stop
guarantees. Modules: ``models``, ``commands`` (checked arguments and the command lines run on nodes),
``status_text`` (reading ``ray status`` / ``--version`` / ``stop`` output), ``common`` (the cluster's
record, asking the head), ``start``, ``stop`` and ``tool`` (argument rules, dispatch, ``status``).
"""
