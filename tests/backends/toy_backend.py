"""An outside backend, as a third-party package would ship one: it delegates every op, launch
and collective to the interpreter and counts them (registered through the entry point
``tessera_ref.backends = toy = toy_backend:CountingBackend`` by the tests)."""
import collections

from tessera_ref.backends import Backend, Communicator, get


class CountingCommunicator(Communicator):
    name = "counting"

    def __init__(self, mesh, inner, counts):
        super().__init__(mesh)
        self.inner, self.counts = inner, counts

    def reduce(self, stacked, axes, op, policy):
        self.counts["reduce"] += 1
        return self.inner.reduce(stacked, axes, op, policy)

    def all_gather(self, stacked, axis, dim):
        self.counts["all_gather"] += 1
        return self.inner.all_gather(stacked, axis, dim)

    def broadcast(self, stacked, axis, root):
        self.counts["broadcast"] += 1
        return self.inner.broadcast(stacked, axis, root)

    def send(self, stacked, dst, tag):
        self.counts["send"] += 1
        return self.inner.send(stacked, dst, tag)

    def recv(self, posted, src, tag):
        self.counts["recv"] += 1
        return self.inner.recv(posted, src, tag)

    def permute(self, stacked, axis, pairs):
        self.counts["permute"] += 1
        return self.inner.permute(stacked, axis, pairs)


class CountingBackend(Backend):
    """Runs everything on the interpreter and counts what it was asked to run."""

    name = "toy"
    description = "counts ops, launches and collectives, runs them on interp"

    def __init__(self):
        self.counts = collections.Counter()
        self.interp = get("interp")

    def run_op(self, call, *operands):
        self.counts["op"] += 1
        self.counts["op:" + call.primitive.name] += 1
        return self.interp.run_op(call, *operands)

    def launch(self, launch):
        self.counts["launch"] += 1
        return self.interp.launch(launch)

    def communicator(self, mesh):
        return CountingCommunicator(mesh, self.interp.communicator(mesh), self.counts)
