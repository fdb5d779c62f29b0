"""Pods on two real nodes find each other by their headless-service names and talk over TCP; the cluster
DNS answers only for the cluster; the `kubernetes` Service reaches the apiserver from a pod."""

from __future__ import annotations

import textwrap

from kubernetes import client

from tests.support.realnodes import pod_log, real_pod, wait_pod_done

PORT = 7000
# Each peer serves one greeting, then resolves the other's headless name (retrying: the record appears
# when the other pod has an address) and reads its greeting.
PEER_SCRIPT = textwrap.dedent("""
    import os, socket, sys, threading, time
    me, peer, ns = os.environ["ME"], os.environ["PEER"], os.environ["NS"]
    srv = socket.create_server(("0.0.0.0", {port}))
    def serve():
        conn, _ = srv.accept()
        conn.sendall(f"hello from {{me}}".encode()); conn.close()
    t = threading.Thread(target=serve); t.start()
    name = f"{{peer}}.peers.{{ns}}.svc.cluster.local"
    deadline = time.monotonic() + 90
    while True:
        try:
            addr = socket.getaddrinfo(name, {port}, socket.AF_INET, socket.SOCK_STREAM)[0][4]
            with socket.create_connection(addr, timeout=5) as c:
                print(f"{{me}} resolved {{name}} to {{addr[0]}} and read: {{c.recv(100).decode()}}")
            break
        except OSError as e:
            if time.monotonic() > deadline:
                sys.exit(f"{{me}}: {{name}}: {{e}}")
            time.sleep(0.2)
    t.join(timeout=90)
    try:
        socket.getaddrinfo("example.com", 80)
        print("outside name resolved")
    except socket.gaierror:
        print("outside name unresolved")
""").format(port=PORT)


def _peer(name: str, peer: str, node: int, namespace: str) -> dict:
    pod = real_pod(name, node, PEER_SCRIPT, hostname=name, subdomain="peers", labels={"app": "peers"})
    pod["spec"]["containers"][0]["env"] = [{"name": "ME", "value": name}, {"name": "PEER", "value": peer},
                                           {"name": "NS", "value": namespace}]
    return pod


def test_pods_on_two_real_nodes_resolve_each_other_and_connect(real_core: client.CoreV1Api,
                                                             real_namespace: str) -> None:
    ns = real_namespace
    real_core.create_namespaced_service(ns, {
        "metadata": {"name": "peers"},
        "spec": {"clusterIP": "None", "selector": {"app": "peers"}, "publishNotReadyAddresses": True,
                 "ports": [{"name": "tcp", "port": PORT}]},
    })
    real_core.create_namespaced_pod(ns, _peer("alpha", "beta", 0, ns))
    real_core.create_namespaced_pod(ns, _peer("beta", "alpha", 1, ns))

    for me, peer, node in (("alpha", "beta", "real-node-0"), ("beta", "alpha", "real-node-1")):
        pod = wait_pod_done(real_core, ns, me)
        log = pod_log(real_core, ns, me)
        assert pod.status.phase == "Succeeded", log
        assert pod.spec.node_name == node
        peer_ip = real_core.read_namespaced_pod(peer, ns).status.pod_ip
        assert f"{me} resolved {peer}.peers.{ns}.svc.cluster.local to {peer_ip} and read: hello from {peer}" in log
        assert "outside name unresolved" in log


API_SCRIPT = textwrap.dedent("""
    import json, os, ssl, urllib.request, urllib.error
    sa = "/var/run/secrets/kubernetes.io/serviceaccount"
    ctx = ssl.create_default_context(cafile=f"{sa}/ca.crt")
    token = open(f"{sa}/token").read()
    ns = open(f"{sa}/namespace").read()
    def get(path):
        req = urllib.request.Request(f"https://kubernetes.default.svc{path}",
                                     headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
                return r.status, json.load(r)
        except urllib.error.HTTPError as e:
            return e.code, json.load(e)
    status, body = get("/version")
    print("version", status, body.get("gitVersion"))
    status, body = get(f"/api/v1/namespaces/{ns}/secrets")
    print("secrets", status, body.get("reason"))
""")


def test_a_pod_reaches_the_apiserver_through_the_kubernetes_service(real_core: client.CoreV1Api,
                                                                    real_namespace: str) -> None:
    real_core.create_namespaced_pod(real_namespace, real_pod("api", 0, API_SCRIPT))
    pod = wait_pod_done(real_core, real_namespace, "api")
    log = pod_log(real_core, real_namespace, "api")
    assert pod.status.phase == "Succeeded", log
    # The mounted token authenticates (200 for discovery) and RBAC applies (the default SA reads no Secrets).
    assert "version 200 v1.36" in log
    assert "secrets 403 Forbidden" in log
