# Steward image: Node 22, production dependencies plus tsx (Steward runs its TypeScript
# directly), the generated Prisma clients, a non-root user. Not built or run in this
# project's CI (no container engine there); `docker-compose config` validates the compose file.
FROM node:22-bookworm-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund

FROM deps AS build
COPY . .
RUN npm run prisma:generate

FROM node:22-bookworm-slim
# Repository changes: git for work trees, bubblewrap for the coding agent's sandbox (the
# container needs user namespaces allowed for bwrap to start; otherwise changes fail closed).
RUN apt-get update && apt-get install -y --no-install-recommends git bubblewrap ca-certificates && rm -rf /var/lib/apt/lists/*
ENV NODE_ENV=production STEWARD_DATA_DIR=/data STEWARD_HTTP_HOST=0.0.0.0
WORKDIR /app
COPY --from=build /app /app
RUN mkdir -p /data && chown node:node /data
USER node
EXPOSE 8787
ENTRYPOINT ["node", "--import", "tsx", "platform/main.ts"]
CMD ["start"]
