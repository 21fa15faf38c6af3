"""The HTTP front of `mmrag serve`: the serving API in the command's own process, calling the ingress by handle.

Why not Serve's HTTP proxy: when an ingress replica dies, the proxy answers the requests it
had sent there with a 500 and cannot send them again, because it streamed their bodies into
the dead replica (Ray Serve 2.60). Here each body is read and validated before any replica
sees it (`mmrag.serving.api`), so a request whose ingress replica died is sent again whole:
`until_answered` routes it to a live or restarted replica until `serving.request_timeout_s`,
then answers 503 with Retry-After. A full ingress queue (`serving.max_queued_requests`
beyond what its replicas work on) is a 503 with Retry-After at once.

uvicorn runs in a thread of its own, so that the command's main thread keeps the signals:
SIGINT and SIGTERM stop the front the same way (`HttpFront.stop`, requests in flight given
`serving.graceful_shutdown_timeout_s`).
"""

from __future__ import annotations

import socket
import threading
import time

import uvicorn
from ray.serve.handle import DeploymentHandle

from mmrag.actors.serving.stage_path import until_answered
from mmrag.config import ServingConfig
from mmrag.serving.api import ApiSettings, ServiceUnavailable, answer_api
from mmrag.serving.state import StageState

START_POLL_S = 0.05


class IngressCaller:
    """`run_pipeline` of the front's API: the ingress deployment's `run`, sent again if its replica dies."""

    def __init__(self, ingress: DeploymentHandle, timeout_s: float):
        self.ingress = ingress
        self.timeout_s = timeout_s

    async def __call__(self, state: StageState) -> tuple[StageState, float]:
        begin = time.perf_counter()
        try:
            ((finished, _),) = await until_answered(lambda: [self.ingress.run.remote(state)],
                                                    time.monotonic() + self.timeout_s, "ingress", self.timeout_s)
        except ServiceUnavailable as exc:
            # Raised in the ingress replica, it arrives wrapped with the replica's traceback: the client
            # gets only its message.
            raise ServiceUnavailable(str(getattr(exc, "cause", exc))) from None
        # Time between processes: everything here but the stages' own work (the ingress's share included).
        return finished, (time.perf_counter() - begin) * 1000 - sum(finished.stage_ms.values())


class HttpFront:
    """The serving API on serving.host:serving.port, from a thread of this process (uvicorn).

    The address is bound when the front is made, before anything is deployed: a port in use
    fails at once (`OSError`), not after the models have loaded.
    """

    def __init__(self, serving: ServingConfig):
        self.serving = serving
        family = socket.getaddrinfo(serving.host, serving.port, type=socket.SOCK_STREAM)[0][0]
        try:
            self.listener = socket.create_server((serving.host, serving.port), family=family)
        except OSError as exc:
            raise OSError(f"cannot listen on {serving.host}:{serving.port}: {exc.strerror}") from exc
        self.server: uvicorn.Server | None = None
        self.thread: threading.Thread | None = None

    def start(self, ingress: DeploymentHandle, settings: ApiSettings) -> None:
        """Answer requests by calling `ingress` (the deployed application's) until `stop`."""
        app = answer_api(IngressCaller(ingress, self.serving.request_timeout_s), settings)
        self.server = uvicorn.Server(uvicorn.Config(app, lifespan="off", access_log=False, log_level="warning",
                                                    timeout_graceful_shutdown=self.serving.graceful_shutdown_timeout_s))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.listener]},
                                       name="http-front", daemon=True)
        self.thread.start()
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("the HTTP front stopped while starting (its error is logged above)")
            time.sleep(START_POLL_S)

    def stop(self) -> None:
        """Stop accepting, let requests in flight finish (at most `serving.graceful_shutdown_timeout_s`), close."""
        if self.server is not None:
            self.server.should_exit = True
            self.thread.join()
        self.listener.close()
