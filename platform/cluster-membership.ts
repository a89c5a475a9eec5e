/**
 * What a Temporal node itself says about the cluster it is in: the admin service's
 * DescribeCluster (served on every frontend port), whose membership info lists the ring
 * members the node can reach. A node has joined the cluster when its view and every other
 * node's view hold each other's membership addresses: a node that runs and heartbeats into
 * the membership table but formed a ring of its own (it could not reach the others) has not.
 *
 * The admin API is the server's own (temporal.server.api.adminservice.v1), not in the SDK's
 * protos: the few fields read here are declared below with their proto numbers.
 */
import grpc from '@grpc/grpc-js';
import protobuf from 'protobufjs';
import { z } from 'zod';

const root = protobuf.Root.fromJSON({
  nested: {
    DescribeClusterRequest: { fields: {} },
    HostInfo: { fields: { identity: { type: 'string', id: 1 } } },
    RingInfo: { fields: { role: { type: 'string', id: 1 }, memberCount: { type: 'int32', id: 2 }, members: { rule: 'repeated', type: 'HostInfo', id: 3 } } },
    MembershipInfo: { fields: { currentHost: { type: 'HostInfo', id: 1 }, reachableMembers: { rule: 'repeated', type: 'string', id: 2 }, rings: { rule: 'repeated', type: 'RingInfo', id: 3 } } },
    DescribeClusterResponse: { fields: { serverVersion: { type: 'string', id: 2 }, membershipInfo: { type: 'MembershipInfo', id: 3 }, clusterName: { type: 'string', id: 5 }, historyShardCount: { type: 'int32', id: 6 } } },
  },
});
const Request = root.lookupType('DescribeClusterRequest');
const Response = root.lookupType('DescribeClusterResponse');
const METHOD = '/temporal.server.api.adminservice.v1.AdminService/DescribeCluster';

const ViewSchema = z.object({
  serverVersion: z.string().default(''),
  clusterName: z.string().default(''),
  historyShardCount: z.number().int().default(0),
  membershipInfo: z
    .object({
      reachableMembers: z.array(z.string()).default([]),
      rings: z.array(z.object({ role: z.string().default(''), memberCount: z.number().int().default(0) })).default([]),
    })
    .default({ reachableMembers: [], rings: [] }),
});

/** A node's own view of the cluster. */
export interface MembershipView {
  serverVersion: string;
  clusterName: string;
  historyShardCount: number;
  /** host:port of every ring member the node reaches (membership ports, its own included). */
  reachable: string[];
  /** Members per service ring (frontend, history, matching, worker). */
  rings: Record<string, number>;
}

/** DescribeCluster on a node's frontend (127.0.0.1:port); rejects when the node does not answer within `timeoutMs`. */
export async function membershipView(port: number, timeoutMs = 3000): Promise<MembershipView> {
  const client = new grpc.Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  try {
    const raw = await new Promise<Uint8Array>((resolve, reject) => {
      client.makeUnaryRequest(
        METHOD,
        (m: Uint8Array) => Buffer.from(m),
        (b: Buffer) => new Uint8Array(b),
        Request.encode(Request.create({})).finish(),
        new grpc.Metadata(),
        { deadline: Date.now() + timeoutMs },
        (err, value) => (err || !value ? reject(err ?? new Error('no answer')) : resolve(value)),
      );
    });
    const decoded = Response.toObject(Response.decode(raw), { defaults: true, arrays: true });
    const view = ViewSchema.parse(decoded);
    return {
      serverVersion: view.serverVersion,
      clusterName: view.clusterName,
      historyShardCount: view.historyShardCount,
      reachable: [...view.membershipInfo.reachableMembers].sort(),
      rings: Object.fromEntries(view.membershipInfo.rings.map((r) => [r.role, r.memberCount])),
    };
  } finally {
    client.close();
  }
}

export interface NodeMembership {
  /** 1-based, as `cluster status` names nodes. */
  node: number;
  frontendPort: number;
  /** The node's membership addresses (host:port), one per service. */
  addresses: string[];
}

export interface RingStanding {
  node: number;
  /** The node answered DescribeCluster. */
  answered: boolean;
  /** The other nodes some of whose members this node does not reach. */
  lacks: number[];
  /** The other nodes that do not reach all of this node's members (or do not answer). */
  lackedBy: number[];
}

/**
 * Whether `nodes` form one ring: each node's own view and the others' views of it. A node that
 * does not answer lacks everyone and is lacked by everyone. Joined: answered, and both lists empty.
 */
export async function ringStanding(nodes: NodeMembership[]): Promise<RingStanding[]> {
  const views = await Promise.all(nodes.map((n) => membershipView(n.frontendPort).catch(() => undefined)));
  const reaches = (i: number, target: NodeMembership) => views[i] !== undefined && target.addresses.every((a) => views[i]!.reachable.includes(a));
  return nodes.map((n, i) => ({
    node: n.node,
    answered: views[i] !== undefined,
    lacks: nodes.filter((o, j) => j !== i && !reaches(i, o)).map((o) => o.node),
    lackedBy: nodes.filter((o, j) => j !== i && !reaches(j, n)).map((o) => o.node),
  }));
}

export const joined = (s: RingStanding) => s.answered && s.lacks.length === 0 && s.lackedBy.length === 0;
