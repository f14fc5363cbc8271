"""Start the operator: credentials, the actors, Kopf.

Why this module exists: ``leasehold operator`` needs a few steps between the
settings and ``kopf.run`` (logging, an API client for the actors, the
runtime passed to handlers as ``memo``); they live here so the CLI stays a
parser and the controller stays handlers.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf
from kubernetes import client, config

from leasehold.controller import handlers  # importing registers the Kopf handlers
from leasehold.controller.act import cron
from leasehold.controller.engines.peering import own_identity
from leasehold.controller.kube import events
from leasehold.controller.runtime import Actors, build_runtime, cron_objects
from leasehold.controller.settings import OperatorSettings
from leasehold.lease.kubeclient import new_api_client


def api_client(pool_size: int = 4) -> client.ApiClient:
    """The operator's API client: ``$KUBECONFIG``, in-cluster, else ``~/.kube/config``.

    Args:
        pool_size: HTTP connections kept to the API server (one per thread
            that uses the client at once; more threads would open and drop
            connections).

    Returns:
        A configured ``kubernetes.client.ApiClient``.

    Raises:
        kubernetes.config.ConfigException: no credentials found.
    """
    try:
        return new_api_client(pool_size=pool_size)
    except config.ConfigException:
        configuration = client.Configuration()
        config.load_kube_config(client_configuration=configuration, persist_config=False)
        configuration.connection_pool_maxsize = pool_size
        return client.ApiClient(configuration)


def run_operator(settings: OperatorSettings) -> int:
    """Run the operator until it is stopped (SIGINT/SIGTERM).

    Args:
        settings: the operator's settings.

    Returns:
        The process exit code.
    """
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
    )
    if logging.getLogger().level > logging.DEBUG:
        # Kopf logs every handler call at INFO; our own lines say what happened.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    identity = own_identity()
    actors = Actors.connect(
        # One connection per thread that may call at once: the reconciles, the
        # reclaims (as many), an Indexed job's steps and the Event senders.
        api_client(
            pool_size=2 * settings.reconcile_workers
            + settings.index_step_workers
            + events.SENDERS
            + 2
        ),
        step_workers=settings.index_step_workers,
        status_write_interval_seconds=settings.status_write_interval_seconds,
    )
    runtime = build_runtime(settings, actors, api_client, identity)
    crons = cron.build_queue(
        cron.CronActor(*cron_objects(api_client(pool_size=2)), actors.ctx, actors.holds),
        runtime.gate,
        settings.retry_delay_seconds,
    )
    if settings.webhook_port:
        handlers.register_webhook()
    kopf_identity: Any = identity  # Kopf's peering.Identity is a NewType of str
    kopf.run(
        identity=kopf_identity,
        liveness_endpoint=settings.liveness_endpoint or None,
        clusterwide=not settings.namespaces,
        namespaces=settings.namespaces,
        memo=kopf.Memo(runtime=runtime, crons=crons),
    )
    return 0
