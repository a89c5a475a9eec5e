# Steward's image, multi-stage: a build stage (all dependencies) generates the Prisma clients
# and prebuilds the workflow bundle; the final stage holds production dependencies only (tsx
# among them: Steward runs its TypeScript directly), the generated code and bundle, and runs
# as the non-root `node` user. One image, three roles: `start` (all in one), `api`, `worker`.
# Not built or run in this project's CI (no container engine there); the compose file that
# uses it is validated with `docker-compose config`.
ARG NODE_IMAGE=node:22-bookworm-slim

FROM ${NODE_IMAGE} AS toolchain
# better-sqlite3 compiles from source where no prebuilt binary matches
RUN apt-get update && apt-get install -y --no-install-recommends python3 make g++ && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY package.json package-lock.json ./

FROM toolchain AS build
RUN npm ci --no-audit --no-fund
COPY . .
RUN npm run prisma:generate \
 && node --import tsx workers/bundle.ts generated/workflow-bundle.js

FROM toolchain AS prod-deps
RUN npm ci --omit=dev --no-audit --no-fund

FROM ${NODE_IMAGE}
# Repository changes: git for work trees, bubblewrap for the coding agent's sandbox (the
# container needs user namespaces allowed for bwrap to start; otherwise changes fail closed).
RUN apt-get update && apt-get install -y --no-install-recommends git bubblewrap ca-certificates && rm -rf /var/lib/apt/lists/*
# MALLOC_ARENA_MAX: glibc's malloc arenas, as the launcher sets them (platform/node-options.ts)
ENV NODE_ENV=production \
    MALLOC_ARENA_MAX=2 \
    STEWARD_DATA_DIR=/data \
    STEWARD_HTTP_HOST=0.0.0.0 \
    STEWARD_WORKFLOW_BUNDLE=/app/generated/workflow-bundle.js
WORKDIR /app
COPY --from=prod-deps /app/node_modules ./node_modules
COPY --from=build /app/generated ./generated
COPY package.json prisma.config.ts tsconfig.json ./
COPY activities ./activities
COPY adapters ./adapters
COPY common ./common
COPY config ./config
COPY domain ./domain
COPY platform ./platform
COPY prisma ./prisma
COPY services ./services
COPY specs ./specs
COPY workers ./workers
COPY workflows ./workflows
RUN mkdir -p /data && chown node:node /data
USER node
EXPOSE 8787
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.STEWARD_HTTP_PORT || 8787) + '/healthz').then(r => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# the Node options of every Steward process on Node 22 (platform/node-options.ts; Node 24 and
# later refuse the async context frame flag, their default: drop it with such a NODE_IMAGE)
ENTRYPOINT ["node", "--experimental-async-context-frame", "--max-semi-space-size=64", "--import", "tsx", "platform/main.ts"]
CMD ["start"]
