//! Graph queries over a workflow: what the runner asks (incoming and outgoing
//! edges, what a loop edge resets) and what validation asks (forward cycles,
//! whether a loop edge really loops back, which nodes can never start).
//!
//! "Forward" edges are those without `max_iterations`; validation keeps them
//! acyclic, so every cycle goes through a bounded loop edge. All walks here are
//! iterative so a pathological file cannot overflow the stack.

use std::collections::HashMap;

use super::{EdgeDef, NodeDef, WorkflowDef};
use crate::ids::{ByNodeId, NodeId};

/// What a loop edge resets when it fires: the nodes and forward edges between
/// its target and its source go back to pending so the loop body runs again.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoopBody {
    /// Nodes on a forward path from the loop edge's `to` to its `from`, both
    /// included, in declaration order.
    pub nodes: Vec<NodeId>,
    /// Ids of the forward edges with both ends among `nodes`, in declaration order.
    pub edges: Vec<String>,
}

impl WorkflowDef {
    /// Edges into `node`, in declaration order: what a node waits on.
    pub fn incoming<'a>(&'a self, node: &'a NodeId) -> impl Iterator<Item = &'a EdgeDef> + 'a {
        self.links
            .of(node, |l, i| &l.incoming[i])
            .iter()
            .map(|&e| &self.edges[e])
    }

    /// Where `node` stands in [`WorkflowDef::nodes`] (file order).
    pub fn position(&self, node: &NodeId) -> Option<usize> {
        self.links.index.get(node).copied()
    }

    /// Edges out of `node`, in declaration order: what a finished node may fire.
    pub fn outgoing<'a>(&'a self, node: &'a NodeId) -> impl Iterator<Item = &'a EdgeDef> + 'a {
        self.links
            .of(node, |l, i| &l.outgoing[i])
            .iter()
            .map(|&e| &self.edges[e])
    }

    /// Nodes on a forward path from `edge.to` to `edge.from` (both included),
    /// and the forward (non-loop) edges with both ends among them. Used when a
    /// loop edge fires: these go back to pending.
    pub fn loop_body(&self, edge: &EdgeDef) -> LoopBody {
        let g = Adjacency::new(self);
        let (Some(to), Some(from)) = (g.index(&edge.to), g.index(&edge.from)) else {
            return LoopBody::default();
        };
        let after_to = g.reachable(&[to], Direction::Out, false);
        let before_from = g.reachable(&[from], Direction::In, false);
        let inside: Vec<bool> = after_to
            .iter()
            .zip(&before_from)
            .map(|(a, b)| *a && *b)
            .collect();
        LoopBody {
            nodes: self
                .nodes
                .iter()
                .zip(&inside)
                .filter(|(_, inside)| **inside)
                .map(|(n, _)| n.id.clone())
                .collect(),
            edges: g
                .edges
                .iter()
                .filter(|&&(e, u, v)| !self.edges[e].is_loop() && inside[u] && inside[v])
                .map(|&(e, _, _)| self.edges[e].id.clone())
                .collect(),
        }
    }

    /// A cycle of forward edges, if any: the index of the edge that closes it
    /// and the path it closes (`[a, b, a]`).
    pub(super) fn forward_cycle(&self) -> Option<(usize, Vec<NodeId>)> {
        #[derive(Clone, Copy, PartialEq)]
        enum Mark {
            New,
            OnPath,
            Done,
        }
        let g = Adjacency::new(self);
        let mut mark = vec![Mark::New; self.nodes.len()];
        for start in 0..self.nodes.len() {
            if mark[start] != Mark::New {
                continue;
            }
            // The DFS path, each node with how many of its out-edges were tried.
            let mut path = vec![(start, 0usize)];
            mark[start] = Mark::OnPath;
            while let Some((u, tried)) = path.last_mut() {
                let u = *u;
                let Some(&(e, v)) = g.out[u].get(*tried) else {
                    mark[u] = Mark::Done;
                    path.pop();
                    continue;
                };
                *tried += 1;
                match mark[v] {
                    Mark::New => {
                        mark[v] = Mark::OnPath;
                        path.push((v, 0));
                    }
                    Mark::OnPath => {
                        let from = path.iter().position(|&(n, _)| n == v).unwrap_or(0);
                        let cycle = path[from..]
                            .iter()
                            .map(|&(n, _)| n)
                            .chain([v])
                            .map(|n| self.nodes[n].id.clone())
                            .collect();
                        return Some((e, cycle));
                    }
                    Mark::Done => {}
                }
            }
        }
        None
    }

    /// Whether `to` can be reached from `from` through forward edges (a node reaches itself).
    pub(super) fn reaches_forward(&self, from: &NodeId, to: &NodeId) -> bool {
        let g = Adjacency::new(self);
        match (g.index(from), g.index(to)) {
            (Some(f), Some(t)) => g.reachable(&[f], Direction::Out, false)[t],
            _ => false,
        }
    }

    /// Nodes no entry node (one without incoming forward edges) leads to,
    /// through any edges. Only a forward cycle can cause this, so it is a
    /// backstop behind the cycle check.
    pub(super) fn unreachable_nodes(&self) -> Vec<&NodeId> {
        let g = Adjacency::new(self);
        let entries: Vec<usize> = (0..self.nodes.len())
            .filter(|&n| g.inn[n].is_empty())
            .collect();
        let seen = g.reachable(&entries, Direction::Out, true);
        self.nodes
            .iter()
            .zip(seen)
            .filter(|(_, seen)| !seen)
            .map(|(n, _)| &n.id)
            .collect()
    }
}

#[derive(Clone, Copy)]
enum Direction {
    In,
    Out,
}

/// Each node's incoming and outgoing edges (indices into `edges`, in
/// declaration order), built once when a workflow is loaded: the runner asks
/// for them at every scheduling decision, and a scan of every edge each time
/// would make a step cost grow with the size of the graph.
#[derive(Debug, Clone, Default)]
pub(crate) struct Links {
    index: ByNodeId<usize>,
    incoming: Vec<Vec<usize>>,
    outgoing: Vec<Vec<usize>>,
}

impl Links {
    pub(crate) fn build(nodes: &[NodeDef], edges: &[EdgeDef]) -> Self {
        let index: ByNodeId<usize> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.id.clone(), i))
            .collect();
        let mut links = Links {
            incoming: vec![Vec::new(); nodes.len()],
            outgoing: vec![Vec::new(); nodes.len()],
            index,
        };
        for (e, edge) in edges.iter().enumerate() {
            if let Some(&to) = links.index.get(&edge.to) {
                links.incoming[to].push(e);
            }
            if let Some(&from) = links.index.get(&edge.from) {
                links.outgoing[from].push(e);
            }
        }
        links
    }

    fn of<'a>(
        &'a self,
        node: &NodeId,
        pick: impl Fn(&'a Self, usize) -> &'a Vec<usize>,
    ) -> &'a [usize] {
        self.index
            .get(node)
            .map_or(&[], |&i| pick(self, i).as_slice())
    }
}

/// Nodes as indices with adjacency lists, built per query: workflows are small
/// and this keeps [`WorkflowDef`] a plain value.
struct Adjacency<'a> {
    index: HashMap<&'a str, usize>,
    /// Every edge whose ends are known nodes: (edge index, from, to).
    edges: Vec<(usize, usize, usize)>,
    /// Forward out-edges per node: (edge index, target).
    out: Vec<Vec<(usize, usize)>>,
    /// Forward in-edges per node: (edge index, source).
    inn: Vec<Vec<(usize, usize)>>,
    /// Loop out-edges per node: (edge index, target).
    loops: Vec<Vec<(usize, usize)>>,
}

impl<'a> Adjacency<'a> {
    fn new(def: &'a WorkflowDef) -> Self {
        let index: HashMap<&str, usize> = def
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.id.as_str(), i))
            .collect();
        let n = def.nodes.len();
        let mut g = Adjacency {
            edges: Vec::with_capacity(def.edges.len()),
            out: vec![Vec::new(); n],
            inn: vec![Vec::new(); n],
            loops: vec![Vec::new(); n],
            index,
        };
        for (e, edge) in def.edges.iter().enumerate() {
            let (Some(u), Some(v)) = (g.index(&edge.from), g.index(&edge.to)) else {
                continue;
            };
            g.edges.push((e, u, v));
            if edge.is_loop() {
                g.loops[u].push((e, v));
            } else {
                g.out[u].push((e, v));
                g.inn[v].push((e, u));
            }
        }
        g
    }

    fn index(&self, id: &NodeId) -> Option<usize> {
        self.index.get(id.as_str()).copied()
    }

    /// Which nodes a walk from `starts` visits (starts included), along forward
    /// edges in `dir`, plus loop edges when `with_loops` (only used with `Out`).
    fn reachable(&self, starts: &[usize], dir: Direction, with_loops: bool) -> Vec<bool> {
        let mut seen = vec![false; self.out.len()];
        let mut todo = starts.to_vec();
        while let Some(u) = todo.pop() {
            if std::mem::replace(&mut seen[u], true) {
                continue;
            }
            let step = match dir {
                Direction::Out => &self.out[u],
                Direction::In => &self.inn[u],
            };
            let loops = if with_loops { &self.loops[u][..] } else { &[] };
            todo.extend(
                step.iter()
                    .chain(loops)
                    .map(|&(_, v)| v)
                    .filter(|&v| !seen[v]),
            );
        }
        seen
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// A workflow of agent nodes `nodes` (all running agent `a`) joined by `edges`.
    fn graph(nodes: &str, edges: &str) -> WorkflowDef {
        let nodes: Vec<String> = nodes
            .split_whitespace()
            .map(|n| format!("{{id: {n}, agent: a}}"))
            .collect();
        let src = format!(
            "name: t\nagents: {{a: {{provider: mock}}}}\nnodes: [{}]\nedges: [{edges}]\n",
            nodes.join(", ")
        );
        WorkflowDef::from_yaml(&src).unwrap()
    }

    fn id(s: &str) -> NodeId {
        NodeId::new(s).unwrap()
    }

    fn ids<'a>(edges: impl Iterator<Item = &'a EdgeDef>) -> Vec<&'a str> {
        edges.map(|e| e.id.as_str()).collect()
    }

    #[test]
    fn incoming_and_outgoing_keep_declaration_order() {
        let def = graph(
            "s a b",
            "{from: s, to: b}, {from: s, to: a}, {from: a, to: b}, {from: b, to: s, max_iterations: 1}",
        );
        assert_eq!(ids(def.outgoing(&id("s"))), ["s->b", "s->a"]);
        assert_eq!(ids(def.incoming(&id("b"))), ["s->b", "a->b"]);
        assert_eq!(ids(def.incoming(&id("s"))), ["b->s"]);
        assert_eq!(ids(def.outgoing(&id("nope"))), Vec::<&str>::new());
    }

    #[test]
    fn loop_body_is_what_lies_between_target_and_source() {
        let def = graph(
            "s a b c x d e",
            "{from: s, to: a}, {from: a, to: b}, {from: a, to: c}, {from: a, to: x}, {from: b, to: d}, \
             {from: c, to: d}, {from: d, to: e}, {from: d, to: a, max_iterations: 2, id: again}",
        );
        let again = def.edges.iter().find(|e| e.id == "again").unwrap();
        let body = def.loop_body(again);
        assert_eq!(body.nodes, ["a", "b", "c", "d"].map(id));
        assert_eq!(body.edges, ["a->b", "a->c", "b->d", "c->d"]);
    }

    #[test]
    fn a_self_loop_resets_only_its_node() {
        let def = graph(
            "a b",
            "{from: a, to: b}, {from: b, to: b, max_iterations: 3}",
        );
        assert_eq!(
            def.loop_body(&def.edges[1]),
            LoopBody {
                nodes: vec![id("b")],
                edges: vec![]
            }
        );
    }

    #[test]
    fn nested_loop_edges_are_not_part_of_a_body() {
        let def = graph(
            "a b c",
            "{from: a, to: b}, {from: b, to: c}, {from: c, to: b, max_iterations: 2}, {from: c, to: a, max_iterations: 2}",
        );
        let body = def.loop_body(&def.edges[3]);
        assert_eq!(body.nodes, ["a", "b", "c"].map(id));
        assert_eq!(body.edges, ["a->b", "b->c"]);
    }

    #[test]
    fn forward_walks() {
        let def = graph("a b c", "{from: a, to: b}, {from: c, to: b}");
        assert!(def.reaches_forward(&id("a"), &id("b")));
        assert!(def.reaches_forward(&id("a"), &id("a")));
        assert!(!def.reaches_forward(&id("b"), &id("a")));
        assert!(!def.reaches_forward(&id("a"), &id("c")));
        assert_eq!(def.forward_cycle(), None);
        assert!(
            def.unreachable_nodes().is_empty(),
            "a and c are both entries"
        );
    }

    /// Validation refuses forward cycles first, so build one by hand to test
    /// the reachability backstop and the cycle finder on the same graph.
    #[test]
    fn nodes_behind_a_forward_cycle_cannot_start() {
        let mut def = graph(
            "s a b",
            "{from: s, to: a}, {from: a, to: b}, {from: b, to: a, max_iterations: 1}",
        );
        def.edges[2].max_iterations = None;
        assert_eq!(
            def.unreachable_nodes(),
            Vec::<&NodeId>::new(),
            "s still leads to a and b"
        );
        assert_eq!(
            def.forward_cycle(),
            Some((2, ["a", "b", "a"].map(id).to_vec()))
        );
        def.edges.remove(0);
        assert_eq!(def.unreachable_nodes(), [&id("a"), &id("b")]);
    }

    #[test]
    fn long_chains_do_not_overflow_the_stack() {
        let n = 20_000;
        let steps: String = (0..n)
            .map(|i| format!("  - {{agent: a, id: n{i}}}\n"))
            .collect();
        let def = WorkflowDef::from_yaml(&format!(
            "name: t\nagents: {{a: {{provider: mock}}}}\nsteps:\n{steps}"
        ))
        .unwrap();
        assert_eq!((def.nodes.len(), def.edges.len()), (n, n - 1));
        assert_eq!(def.forward_cycle(), None);
    }
}
